//! `weir import` of Gateway API manifests (issue 56 §2, offline): a Gateway's listeners and the
//! HTTPRoutes attached to them, served and checked over the wire against local origins; the
//! reasons the specification names (NotAllowedByListeners, NoMatchingListenerHostname,
//! RefNotPermitted, InvalidKind) noted per object, invalid backends answered 500.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::net::SocketAddr;

use common::origin::{http_origin, Origin};

/// An origin answering `NAME REQUEST-LINE x-added=VALUE`.
fn named(name: &'static str) -> Origin {
    http_origin(move |req| {
        common::origin::ok(&format!(
            "{name} {} x-added={}",
            req.line,
            req.header("x-added").unwrap_or("-")
        ))
    })
}

fn manifest(one: SocketAddr, two: SocketAddr) -> String {
    let (p1, p2) = (one.port(), two.port());
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{ name: edge, namespace: infra }}
spec:
  gatewayClassName: weir
  listeners:
    - name: web
      protocol: HTTP
      port: 80
      hostname: "*.gw.test"
      allowedRoutes: {{ namespaces: {{ from: All }} }}
    - name: same
      protocol: HTTP
      port: 80
      hostname: same.test
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: shop, namespace: app }}
spec:
  parentRefs: [{{ name: edge, namespace: infra, sectionName: web }}]
  hostnames: [shop.gw.test]
  rules:
    - matches: [{{ path: {{ type: Exact, value: /exact }} }}]
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /api }}, headers: [{{ name: x-env, value: canary }}] }}]
      backendRefs: [{{ name: two, port: {p2} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /api }} }}]
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /old }} }}]
      filters:
        - type: RequestRedirect
          requestRedirect: {{ scheme: https, statusCode: 301 }}
    - matches: [{{ path: {{ type: PathPrefix, value: /v1 }} }}]
      filters:
        - type: URLRewrite
          urlRewrite: {{ path: {{ type: ReplacePrefixMatch, replacePrefixMatch: /v2 }} }}
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /hdr }} }}]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: {{ set: [{{ name: x-added, value: yes }}] }}
        - type: ResponseHeaderModifier
          responseHeaderModifier: {{ add: [{{ name: x-resp, value: "1" }}] }}
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /split }} }}]
      backendRefs: [{{ name: one, port: {p1}, weight: 50 }}, {{ name: two, port: {p2}, weight: 50 }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /kind }} }}]
      backendRefs: [{{ group: example.com, kind: Bucket, name: b }}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: cross, namespace: team }}
spec:
  parentRefs: [{{ name: edge, namespace: infra, sectionName: web }}]
  hostnames: [team.gw.test]
  rules:
    - matches: [{{ path: {{ type: PathPrefix, value: /granted }} }}]
      backendRefs: [{{ name: one, namespace: app, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /refused }} }}]
      backendRefs: [{{ name: two, namespace: private, port: {p2} }}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{ name: team-to-app, namespace: app }}
spec:
  from: [{{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: team }}]
  to: [{{ group: "", kind: Service }}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: elsewhere, namespace: app }}
spec:
  parentRefs: [{{ name: edge, namespace: infra, sectionName: web }}]
  hostnames: [elsewhere.test]
  rules:
    - backendRefs: [{{ name: two, port: {p2} }}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: stranger, namespace: app }}
spec:
  parentRefs: [{{ name: edge, namespace: infra, sectionName: same }}]
  rules:
    - backendRefs: [{{ name: two, port: {p2} }}]
"#
    )
}

/// `manifest` written under `dir` and imported as `weir import --service-address
/// '127.0.0.1:{port}'` would.
fn import(dir: &std::path::Path, manifest: &str) -> weir::import::Imported {
    let file = dir.join("gateway.yaml");
    std::fs::write(&file, manifest).unwrap();
    let opts = weir::import::ingress::Options {
        class: "nginx".into(),
        service_address: "127.0.0.1:{port}".into(),
        secrets_dir: dir.display().to_string(),
        cluster: None,
    };
    weir::import::kubernetes(&file, &opts).unwrap()
}

fn ask(addr: SocketAddr, raw: &str) -> common::Response {
    let mut c = common::connect(addr);
    c.write_all(raw.as_bytes()).unwrap();
    common::read_response(&mut c)
}

fn get(addr: SocketAddr, host: &str, path: &str) -> common::Response {
    ask(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
    )
}

#[test]
fn httproutes_are_served_as_the_gateway_api_says() {
    let (one, two) = (named("one"), named("two"));
    let dir = std::env::temp_dir().join(format!("weir-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gateway.yaml");
    std::fs::write(&file, manifest(one.addr, two.addr)).unwrap();
    let opts = weir::import::ingress::Options {
        class: "nginx".into(),
        service_address: "127.0.0.1:{port}".into(),
        secrets_dir: dir.display().to_string(),
        cluster: None,
    };
    let imported = weir::import::kubernetes(&file, &opts).unwrap();
    let notes = imported.skipped.join("\n");
    for expected in [
        "HTTPRoute app/shop: InvalidKind",
        "HTTPRoute team/cross: RefNotPermitted: Service private/two",
        "HTTPRoute app/elsewhere: NoMatchingListenerHostname",
        "HTTPRoute app/stranger: NotAllowedByListeners",
    ] {
        assert!(notes.contains(expected), "{expected:?} not in\n{notes}");
    }
    let cfg = weir::runtime::load_str(&imported.yaml, &dir, |v| {
        (v == "WEIR_LISTEN").then(|| "127.0.0.1:0".to_string())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];
    let text = |r: common::Response| r.text();

    // Exact, and PathPrefix by whole segments.
    assert!(text(get(addr, "shop.gw.test", "/exact")).starts_with("one GET /exact "));
    assert_eq!(get(addr, "shop.gw.test", "/exact/x").status, 404);
    assert!(text(get(addr, "shop.gw.test", "/api/x")).starts_with("one GET /api/x "));
    assert_eq!(get(addr, "shop.gw.test", "/apix").status, 404);
    // A header match is more specific than the same path without.
    let r = ask(
        addr,
        "GET /api HTTP/1.1\r\nHost: shop.gw.test\r\nX-Env: canary\r\n\r\n",
    );
    assert!(text(r).starts_with("two "));
    // RequestRedirect.
    let r = get(addr, "shop.gw.test", "/old/page?q=1");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://shop.gw.test/old/page?q=1")
    );
    // URLRewrite ReplacePrefixMatch.
    assert!(text(get(addr, "shop.gw.test", "/v1/items")).starts_with("one GET /v2/items "));
    // Header modifiers, both ways.
    let r = get(addr, "shop.gw.test", "/hdr");
    assert_eq!(r.header("x-resp"), Some("1"));
    assert!(text(r).ends_with("x-added=yes"));
    // Weighted backends: both serve.
    let seen: std::collections::BTreeSet<String> = (0..40)
        .map(|_| text(get(addr, "shop.gw.test", "/split"))[..3].to_string())
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    // Invalid backends: 500, as the specification says.
    assert_eq!(get(addr, "shop.gw.test", "/kind").status, 500);
    assert_eq!(get(addr, "team.gw.test", "/refused").status, 500);
    // Across namespaces with a ReferenceGrant.
    assert!(text(get(addr, "team.gw.test", "/granted")).starts_with("one "));
    // Routes that did not attach are not served.
    assert_eq!(get(addr, "elsewhere.test", "/").status, 404);
    assert_eq!(get(addr, "same.test", "/").status, 404);
    common::inproc::stop(handle);
    drop((one, two));
}

/// The second attack review's cases: an untranslated filter (an `ExtensionRef`, often auth)
/// or a backend's own filters answer 500 instead of serving; a longer prefix beats a header
/// match; a listener's host keeps its requests from another listener's routes; a second port
/// is not merged onto the first; a path regex cannot escape its anchors; header regexes match
/// the whole value; `ReplacePrefixMatch` under `PathPrefix /` loads and works.
#[test]
fn gateway_rules_fail_closed_and_keep_their_precedence() {
    let (one, two) = (named("one"), named("two"));
    let dir = std::env::temp_dir().join(format!("weir-gateway2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (p1, p2) = (one.addr.port(), two.addr.port());
    let manifest = format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{ name: edge, namespace: app }}
spec:
  gatewayClassName: weir
  listeners:
    - {{ name: exact, protocol: HTTP, port: 80, hostname: foo.bar.test }}
    - {{ name: wild, protocol: HTTP, port: 80, hostname: "*.bar.test" }}
    - {{ name: internal, protocol: HTTP, port: 8080, hostname: internal.test }}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: foo, namespace: app }}
spec:
  parentRefs: [{{ name: edge, sectionName: exact }}]
  rules:
    - matches: [{{ path: {{ type: PathPrefix, value: /api }} }}]
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /admin }} }}]
      filters: [{{ type: ExtensionRef, extensionRef: {{ group: example.com, kind: AuthPolicy, name: basic }} }}]
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /bf }} }}]
      backendRefs:
        - name: one
          port: {p1}
          filters: [{{ type: ExtensionRef, extensionRef: {{ group: example.com, kind: AuthPolicy, name: basic }} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: / }}, headers: [{{ name: x-env, value: canary }}] }}]
      backendRefs: [{{ name: two, port: {p2} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /long }} }}]
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: RegularExpression, value: "/re)|(.*" }} }}]
      backendRefs: [{{ name: two, port: {p2} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /h }}, headers: [{{ type: RegularExpression, name: x-t, value: abc }}] }}]
      backendRefs: [{{ name: two, port: {p2} }}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: wild, namespace: app }}
spec:
  parentRefs: [{{ name: edge, sectionName: wild }}]
  rules:
    - matches: [{{ path: {{ type: PathPrefix, value: / }} }}]
      filters:
        - type: RequestRedirect
          requestRedirect: {{ path: {{ type: ReplacePrefixMatch, replacePrefixMatch: /new }}, statusCode: 302 }}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: internal, namespace: app }}
spec:
  parentRefs: [{{ name: edge, sectionName: internal }}]
  rules:
    - backendRefs: [{{ name: two, port: {p2} }}]
"#
    );
    let imported = import(&dir, &manifest);
    let notes = imported.skipped.join("\n");
    for expected in [
        "filter ExtensionRef not translated: the rule answers 500",
        "filters on the backend one are not translated",
        "listener internal on port 8080",
        "path regex `/re)|(.*` does not compile",
    ] {
        assert!(notes.contains(expected), "{expected:?} not in\n{notes}");
    }
    let cfg = weir::runtime::load_str(&imported.yaml, &dir, |v| {
        (v == "WEIR_LISTEN").then(|| "127.0.0.1:0".to_string())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];
    assert_eq!(
        get(addr, "foo.bar.test", "/admin/x").status,
        500,
        "ExtensionRef"
    );
    assert_eq!(
        get(addr, "foo.bar.test", "/bf").status,
        500,
        "backend filters"
    );
    let r = ask(
        addr,
        "GET /long/x HTTP/1.1\r\nHost: foo.bar.test\r\nX-Env: canary\r\n\r\n",
    );
    assert!(
        r.text().starts_with("one "),
        "a longer prefix first: {}",
        r.text()
    );
    // foo.bar.test's requests stay with its listener's routes (not the wildcard's redirect).
    assert_eq!(get(addr, "foo.bar.test", "/other").status, 404);
    // The broken regex matched every path once.
    assert_eq!(get(addr, "foo.bar.test", "/anything").status, 404);
    // A header regex is the whole value.
    let r = ask(
        addr,
        "GET /h HTTP/1.1\r\nHost: foo.bar.test\r\nX-T: zzabczz\r\n\r\n",
    );
    assert_eq!(r.status, 404);
    let r = ask(
        addr,
        "GET /h HTTP/1.1\r\nHost: foo.bar.test\r\nX-T: abc\r\n\r\n",
    );
    assert!(r.text().starts_with("two "));
    // ReplacePrefixMatch under PathPrefix /.
    let r = get(addr, "x.bar.test", "/a/b");
    assert_eq!(
        (r.status, r.header("location")),
        (302, Some("http://x.bar.test/new/a/b"))
    );
    // The port-8080 listener's route is not on this one.
    assert_eq!(get(addr, "internal.test", "/").status, 404);
    common::inproc::stop(handle);
    drop((one, two));
}

/// HTTPRoute `timeouts` and the `CORS` filter (both in the standard channel since v1.5), over
/// the wire: a backend slower than `request` answers 504 in about the limit; `backendRequest`
/// (shorter) wins; `0s` is no limit; a preflight from an allowed origin gets the rule's
/// `Access-Control-Allow-*`, another origin 403; credentials with `*` are left off (noted).
#[test]
fn httproute_timeouts_and_cors_are_kept() {
    let slow = http_origin(|_| {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        common::origin::ok("late")
    });
    let one = named("one");
    let dir = std::env::temp_dir().join(format!("weir-gateway3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ps, p1) = (slow.addr.port(), one.addr.port());
    let manifest = format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{ name: edge, namespace: app }}
spec:
  gatewayClassName: weir
  listeners: [{{ name: web, protocol: HTTP, port: 80 }}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: api, namespace: app }}
spec:
  parentRefs: [{{ name: edge }}]
  hostnames: [api.test]
  rules:
    - matches: [{{ path: {{ type: PathPrefix, value: /short }} }}]
      timeouts: {{ request: 500ms }}
      backendRefs: [{{ name: slow, port: {ps} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /try }} }}]
      timeouts: {{ request: 10s, backendRequest: 400ms }}
      backendRefs: [{{ name: slow, port: {ps} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /off }} }}]
      timeouts: {{ request: 0s }}
      backendRefs: [{{ name: slow, port: {ps} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /cors }} }}]
      filters:
        - type: CORS
          cors:
            allowOrigins: ["https://app.example", "https://*.shop.example"]
            allowMethods: [GET, PUT]
            allowHeaders: [x-token]
            exposeHeaders: [x-trace]
            allowCredentials: true
            maxAge: 600
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /weird }} }}]
      filters: [{{ type: CORS, cors: {{ allowOrigins: ["~^https?://.*$", "https://*", "https://*."], allowCredentials: true }} }}]
      backendRefs: [{{ name: one, port: {p1} }}]
    - matches: [{{ path: {{ type: PathPrefix, value: /open }} }}]
      filters: [{{ type: CORS, cors: {{ allowOrigins: ["*"], allowMethods: ["*"], allowCredentials: true }} }}]
      backendRefs: [{{ name: one, port: {p1} }}]
"#
    );
    let imported = import(&dir, &manifest);
    let notes = imported.skipped.join("\n");
    assert!(
        notes.contains("CORS allowCredentials with the origin *: credentials left off"),
        "{notes}"
    );
    assert!(!notes.contains("timeouts"), "{notes}");
    assert!(
        notes.contains("CORS origin `~^https?://.*$` is not an origin the specification allows"),
        "{notes}"
    );
    let cfg = weir::runtime::load_str(&imported.yaml, &dir, |v| {
        (v == "WEIR_LISTEN").then(|| "127.0.0.1:0".to_string())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];
    let timed = |path: &str| {
        let t = std::time::Instant::now();
        let r = get(addr, "api.test", path);
        (r.status, t.elapsed())
    };
    let (status, took) = timed("/short");
    assert_eq!(status, 504);
    assert!(took < std::time::Duration::from_millis(1300), "{took:?}");
    let (status, took) = timed("/try");
    assert_eq!(status, 504);
    assert!(took < std::time::Duration::from_millis(1300), "{took:?}");
    let r = get(addr, "api.test", "/off");
    assert_eq!((r.status, r.text().as_str()), (200, "late"));
    // A preflight from an allowed origin (a subdomain by the wildcard).
    let r = ask(
        addr,
        "OPTIONS /cors/x HTTP/1.1\r\nHost: api.test\r\nOrigin: https://eu.shop.example\r\nAccess-Control-Request-Method: PUT\r\nAccess-Control-Request-Headers: x-token\r\n\r\n",
    );
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://eu.shop.example")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("access-control-allow-methods"), Some("GET, PUT"));
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    // A method or an origin the filter does not list.
    for (origin, method) in [
        ("https://app.example", "DELETE"),
        ("https://evil.example", "GET"),
    ] {
        let r = ask(
            addr,
            &format!("OPTIONS /cors/x HTTP/1.1\r\nHost: api.test\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: {method}\r\n\r\n"),
        );
        assert_eq!(r.status, 403, "{origin} {method}");
    }
    // A simple request gets its fields from the response phase.
    let r = ask(
        addr,
        "GET /cors/x HTTP/1.1\r\nHost: api.test\r\nOrigin: https://app.example\r\n\r\n",
    );
    assert!(r.text().starts_with("one "), "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(r.header("access-control-expose-headers"), Some("x-trace"));
    // weir's own origin syntax is not taken from a manifest, nor `https://*.`: nothing is
    // allowed there.
    for origin in ["https://evil.example", "https://attacker.com."] {
        let r = ask(
            addr,
            &format!("OPTIONS /weird HTTP/1.1\r\nHost: api.test\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: GET\r\n\r\n"),
        );
        assert_eq!(r.status, 403, "{origin}: {r:?}");
    }
    assert!(notes.contains("CORS origin `https://*.` is not"), "{notes}");
    // `*` with credentials: any origin, no credentials; `allowMethods: ["*"]` allows DELETE.
    let r = ask(
        addr,
        "OPTIONS /open HTTP/1.1\r\nHost: api.test\r\nOrigin: https://any.example\r\nAccess-Control-Request-Method: DELETE\r\n\r\n",
    );
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("access-control-allow-credentials"), None);
    common::inproc::stop(handle);
    drop((slow, one));
}

/// examples/kubernetes/manifests.yaml as its header says: imported with
/// `--service-address '127.0.0.1:{port}'`, the config loads with `WEIR_LISTEN`, and the
/// Gateway's and the Ingress's routes answer.
#[test]
fn the_kubernetes_example_imports_as_its_header_says() {
    let example = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/kubernetes/manifests.yaml"
    ));
    let opts = weir::import::ingress::Options {
        class: "nginx".into(),
        service_address: "127.0.0.1:{port}".into(),
        secrets_dir: "/etc/weir".into(),
        cluster: None,
    };
    let imported = weir::import::kubernetes(example, &opts).unwrap();
    let dir = example.parent().unwrap();
    let cfg = weir::runtime::load_str(&imported.yaml, dir, |v| {
        (v == "WEIR_LISTEN").then(|| "127.0.0.1:0".to_string())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];
    let r = get(addr, "shop.example.test", "/old/x");
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("http://shop.example.test/new/x"))
    );
    // The origins are not running: the routes exist and fail as an upstream failure does.
    assert_eq!(get(addr, "shop.example.test", "/cart").status, 502);
    assert_eq!(get(addr, "api.example.test", "/v1/items").status, 502);
    assert_eq!(get(addr, "other.example.test", "/").status, 404);
    common::inproc::stop(handle);
}
