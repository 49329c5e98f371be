//! `weir import` of Gateway API manifests (issue 56 §2, offline): a Gateway's listeners and the
//! HTTPRoutes attached to them, served and checked over the wire against local origins; the
//! reasons the specification names (NotAllowedByListeners, NoMatchingListenerHostname,
//! RefNotPermitted, InvalidKind) noted per object, invalid backends answered 500.
#![allow(clippy::unwrap_used)]

mod common;

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
