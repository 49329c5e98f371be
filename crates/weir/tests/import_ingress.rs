//! `weir import` of Kubernetes Ingress manifests (issue 56 §2, offline): the converted config
//! served, and each translated annotation checked over the wire against local origins (the
//! Services' addresses given by `--service-address 127.0.0.1:{port}`); what is not translated
//! listed per object, and restricting annotations left untranslated refuse.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::net::SocketAddr;

use common::origin::{http_origin, Origin};

/// An origin answering `NAME REQUEST-LINE`.
fn named(name: &'static str) -> Origin {
    http_origin(move |req| common::origin::ok(&format!("{name} {}", req.line)))
}

fn manifest(a: SocketAddr, b: SocketAddr, c: SocketAddr) -> String {
    let (pa, pb, pc) = (a.port(), b.port(), c.port());
    format!(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: web
  annotations:
    nginx.ingress.kubernetes.io/server-alias: "alias.test"
    nginx.ingress.kubernetes.io/proxy-body-size: "1k"
    nginx.ingress.kubernetes.io/proxy-buffering: "off"
spec:
  ingressClassName: nginx
  defaultBackend:
    service: {{ name: fallback, port: {{ number: {pc} }} }}
  rules:
    - host: shop.test
      http:
        paths:
          - path: /api
            pathType: Prefix
            backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }}
          - path: /exact
            pathType: Exact
            backend: {{ service: {{ name: other, port: {{ number: {pb} }} }} }}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  namespace: web
  annotations:
    nginx.ingress.kubernetes.io/use-regex: "true"
    nginx.ingress.kubernetes.io/rewrite-target: /$2
    nginx.ingress.kubernetes.io/enable-cors: "true"
    nginx.ingress.kubernetes.io/cors-allow-origin: "https://app.test"
spec:
  ingressClassName: nginx
  rules:
    - host: rw.test
      http:
        paths:
          - path: /something(/|$)(.*)
            pathType: ImplementationSpecific
            backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }}
---
apiVersion: v1
kind: List
items:
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: guarded
      namespace: web
      annotations:
        nginx.ingress.kubernetes.io/whitelist-source-range: "10.0.0.0/8"
    spec:
      ingressClassName: nginx
      rules:
        - host: guarded.test
          http:
            paths:
              - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }} }}
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: authed
      namespace: web
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "http://auth.example/check"
    spec:
      ingressClassName: nginx
      rules:
        - host: authed.test
          http:
            paths:
              - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }} }}
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: limited
      namespace: web
      annotations:
        nginx.ingress.kubernetes.io/limit-rps: "1"
        nginx.ingress.kubernetes.io/force-ssl-redirect: "false"
    spec:
      ingressClassName: nginx
      rules:
        - host: limited.test
          http:
            paths:
              - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }} }}
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: moved
      namespace: web
      annotations:
        nginx.ingress.kubernetes.io/permanent-redirect: "https://new.test/"
    spec:
      ingressClassName: nginx
      rules:
        - host: moved.test
          http:
            paths:
              - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }} }}
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: rooted
      namespace: web
      annotations:
        nginx.ingress.kubernetes.io/app-root: /app
        nginx.ingress.kubernetes.io/force-ssl-redirect: "true"
    spec:
      ingressClassName: nginx
      rules:
        - host: rooted.test
          http:
            paths:
              - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }} }}
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: elsewhere
      namespace: web
    spec:
      ingressClassName: traefik
      rules:
        - host: elsewhere.test
          http:
            paths:
              - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }} }}
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: shop-canary
      namespace: web
      annotations:
        nginx.ingress.kubernetes.io/canary: "true"
        nginx.ingress.kubernetes.io/canary-weight: "50"
    spec:
      ingressClassName: nginx
      rules:
        - host: shop.test
          http:
            paths:
              - {{ path: /api, pathType: Prefix, backend: {{ service: {{ name: other, port: {{ number: {pb} }} }} }} }}
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
fn ingress_manifests_are_served_as_ingress_nginx_would() {
    let (a, b, c) = (named("api"), named("other"), named("fallback"));
    let dir = std::env::temp_dir().join(format!("weir-ingress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ingress.yaml");
    std::fs::write(&file, manifest(a.addr, b.addr, c.addr)).unwrap();
    let opts = weir::import::ingress::Options {
        class: "nginx".into(),
        service_address: "127.0.0.1:{port}".into(),
    };
    let imported = weir::import::kubernetes(&file, &opts).unwrap();
    let notes = imported.skipped.join("\n");
    // Listed per object, never dropped silently.
    for expected in [
        "Ingress web/shop: nginx.ingress.kubernetes.io/proxy-buffering",
        "Ingress web/authed: nginx.ingress.kubernetes.io/auth-url is not translated",
        "Ingress web/elsewhere: class traefik",
        "Ingress web/shop-canary: a canary Ingress",
    ] {
        assert!(notes.contains(expected), "{expected:?} not in\n{notes}");
    }
    let cfg = weir::runtime::load_str(&imported.yaml, &dir, |v| {
        (v == "WEIR_LISTEN").then(|| "127.0.0.1:0".to_string())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];

    // Prefix is by whole segments; Exact is exact; an unknown host gets the default backend.
    assert_eq!(
        get(addr, "shop.test", "/api").text(),
        "api GET /api HTTP/1.1"
    );
    assert_eq!(
        get(addr, "shop.test", "/api/x").text(),
        "api GET /api/x HTTP/1.1"
    );
    assert!(get(addr, "shop.test", "/apix")
        .text()
        .starts_with("fallback"));
    assert_eq!(
        get(addr, "shop.test", "/exact").text(),
        "other GET /exact HTTP/1.1"
    );
    assert!(get(addr, "shop.test", "/exact/more")
        .text()
        .starts_with("fallback"));
    assert!(get(addr, "nobody.test", "/").text().starts_with("fallback"));
    // server-alias.
    assert!(get(addr, "alias.test", "/api").text().starts_with("api"));
    // proxy-body-size: 1k.
    let body = "x".repeat(2048);
    let r = ask(
        addr,
        &format!("POST /api HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 2048\r\n\r\n{body}"),
    );
    assert_eq!(r.status, 413);
    // use-regex + rewrite-target.
    assert_eq!(
        get(addr, "rw.test", "/something/new/path").text(),
        "api GET /new/path HTTP/1.1"
    );
    // enable-cors: a preflight answered here.
    let r = ask(
        addr,
        "OPTIONS /something/x HTTP/1.1\r\nHost: rw.test\r\nOrigin: https://app.test\r\nAccess-Control-Request-Method: GET\r\n\r\n",
    );
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.test")
    );
    // whitelist-source-range: 127.0.0.1 is not in 10.0.0.0/8.
    assert_eq!(get(addr, "guarded.test", "/").status, 403);
    // An untranslated auth-url refuses: never served without the check it asked for.
    assert_eq!(get(addr, "authed.test", "/").status, 503);
    // limit-rps 1 (burst 5): a quick run of 12 is cut, with ingress-nginx's 503.
    let statuses: Vec<u16> = (0..12)
        .map(|_| get(addr, "limited.test", "/").status)
        .collect();
    assert!(
        statuses.contains(&200) && statuses.contains(&503),
        "{statuses:?}"
    );
    // permanent-redirect.
    let r = get(addr, "moved.test", "/x");
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("https://new.test/"))
    );
    // force-ssl-redirect, and app-root on the TLS side's own routes.
    let r = get(addr, "rooted.test", "/");
    assert_eq!(r.status, 302, "app-root first");
    assert_eq!(r.header("location"), Some("/app"));
    let r = get(addr, "rooted.test", "/app");
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("https://rooted.test/app"));
    // The other class and the canary are not served.
    assert!(get(addr, "elsewhere.test", "/")
        .text()
        .starts_with("fallback"));
    common::inproc::stop(handle);
    drop((a, b, c));
}

/// The binary: `weir import ingress.yaml` prints the config (it passes `weir check` with the
/// environment's listener) and lists the rest on stderr.
#[test]
fn weir_import_reads_manifests_from_the_command_line() {
    const WEIR: &str = env!("CARGO_BIN_EXE_weir");
    let dir = std::env::temp_dir().join(format!("weir-ingress-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ingress.yaml");
    let addr: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    std::fs::write(&file, manifest(addr, addr, addr)).unwrap();
    let out = std::process::Command::new(WEIR)
        .args([
            "import",
            file.to_str().unwrap(),
            "--service-address",
            "127.0.0.1:{port}",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("auth-url is not translated"), "{stderr}");
    let converted = dir.join("weir.yaml");
    std::fs::write(&converted, &out.stdout).unwrap();
    let check = std::process::Command::new(WEIR)
        .args(["check", "-c", converted.to_str().unwrap()])
        .env("WEIR_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&check.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    // --strict: something was left out.
    let strict = std::process::Command::new(WEIR)
        .args(["import", "--strict", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(2));
}
