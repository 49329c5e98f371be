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

fn manifest(a: SocketAddr, b: SocketAddr, c: SocketAddr, auth: SocketAddr) -> String {
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
        nginx.ingress.kubernetes.io/auth-url: "http://{auth}/check"
        nginx.ingress.kubernetes.io/auth-response-headers: "x-user"
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
      name: oauth
      namespace: web
      annotations:
        nginx.ingress.kubernetes.io/auth-url: "https://$host/oauth2/auth"
    spec:
      ingressClassName: nginx
      rules:
        - host: oauth.test
          http:
            paths:
              - {{ path: /, pathType: Prefix, backend: {{ service: {{ name: api, port: {{ number: {pa} }} }} }} }}
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: staff
      namespace: web
      annotations:
        nginx.ingress.kubernetes.io/auth-type: basic
        nginx.ingress.kubernetes.io/auth-secret: users
        nginx.ingress.kubernetes.io/affinity: cookie
    spec:
      ingressClassName: nginx
      rules:
        - host: staff.test
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
        nginx.ingress.kubernetes.io/canary-by-header: x-canary
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
    // The auth service: 200 with `x-user` for `Authorization: Bearer good`, else 401.
    let auth = http_origin(|req| match req.header("authorization") {
        Some("Bearer good") => {
            b"HTTP/1.1 200 OK\r\nX-User: alice\r\nContent-Length: 0\r\n\r\n".to_vec()
        }
        _ => b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Length: 0\r\n\r\n"
            .to_vec(),
    });
    let dir = std::env::temp_dir().join(format!("weir-ingress-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("auth")).unwrap();
    std::fs::write(
        dir.join("auth/web-users.htpasswd"),
        htpasswd("bob", "s3cret"),
    )
    .unwrap();
    let file = dir.join("ingress.yaml");
    std::fs::write(&file, manifest(a.addr, b.addr, c.addr, auth.addr)).unwrap();
    let opts = weir::import::ingress::Options {
        class: "nginx".into(),
        service_address: "127.0.0.1:{port}".into(),
        secrets_dir: dir.display().to_string(),
    };
    let imported = weir::import::kubernetes(&file, &opts).unwrap();
    let notes = imported.skipped.join("\n");
    // Listed per object, never dropped silently.
    for expected in [
        "Ingress web/shop: nginx.ingress.kubernetes.io/proxy-buffering",
        "Ingress web/oauth: nginx.ingress.kubernetes.io/auth-url `https://$host/oauth2/auth` is not translated",
        "Ingress web/staff: nginx.ingress.kubernetes.io/auth-secret web/users: write its `auth` key",
        "Ingress web/elsewhere: class traefik",
    ] {
        assert!(notes.contains(expected), "{expected:?} not in\n{notes}");
    }
    // `sticky.secret_env` is read from the process's environment.
    std::env::set_var(
        "WEIR_STICKY_SECRET",
        "a sticky secret of at least 32 characters",
    );
    let cfg = weir::runtime::load_str(&imported.yaml, &dir, |v| match v {
        "WEIR_LISTEN" => Some("127.0.0.1:0".to_string()),
        "WEIR_STICKY_SECRET" => Some("a sticky secret of at least 32 characters".to_string()),
        _ => None,
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
    // The canary Ingress: by header, to its backend; without it, the main one.
    let r = ask(
        addr,
        "GET /api HTTP/1.1\r\nHost: shop.test\r\nX-Canary: always\r\n\r\n",
    );
    assert!(r.text().starts_with("other"), "{}", r.text());
    assert!(get(addr, "shop.test", "/api").text().starts_with("api"));
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
    // auth-url: forward_auth to the service; its 401 goes to the client.
    let r = get(addr, "authed.test", "/");
    assert_eq!(
        (r.status, r.header("www-authenticate")),
        (401, Some("Bearer"))
    );
    let r = ask(
        addr,
        "GET /in HTTP/1.1\r\nHost: authed.test\r\nAuthorization: Bearer good\r\n\r\n",
    );
    assert_eq!(r.text(), "api GET /in HTTP/1.1");
    // An auth-url with variables cannot be kept: refused, never served without its check.
    assert_eq!(get(addr, "oauth.test", "/").status, 503);
    // auth-type basic on the Secret's htpasswd; affinity: cookie.
    assert_eq!(get(addr, "staff.test", "/").status, 401);
    let r = ask(
        addr,
        "GET / HTTP/1.1\r\nHost: staff.test\r\nAuthorization: Basic Ym9iOnMzY3JldA==\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert!(
        r.header("set-cookie")
            .is_some_and(|c| c.starts_with("INGRESSCOOKIE=")),
        "{:?}",
        r.header("set-cookie")
    );
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
    // app-root, then force-ssl-redirect.
    let r = get(addr, "rooted.test", "/");
    assert_eq!((r.status, r.header("location")), (302, Some("/app")));
    let r = get(addr, "rooted.test", "/app");
    assert_eq!(
        (r.status, r.header("location")),
        (308, Some("https://rooted.test/app"))
    );
    // The other class is not served.
    assert!(get(addr, "elsewhere.test", "/")
        .text()
        .starts_with("fallback"));
    common::inproc::stop(handle);
    drop((a, b, c, auth));
}

/// The binary: `weir import ingress.yaml` prints the config (it passes `weir check` with the
/// environment's listener and the Secrets' files in `--secrets-dir`) and lists the rest on
/// stderr.
#[test]
fn weir_import_reads_manifests_from_the_command_line() {
    const WEIR: &str = env!("CARGO_BIN_EXE_weir");
    let dir = std::env::temp_dir().join(format!("weir-ingress-cli-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("auth")).unwrap();
    std::fs::write(
        dir.join("auth/web-users.htpasswd"),
        htpasswd("bob", "s3cret"),
    )
    .unwrap();
    let file = dir.join("ingress.yaml");
    let addr: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    std::fs::write(&file, manifest(addr, addr, addr, addr)).unwrap();
    let import = |extra: &[&str]| {
        let mut args = vec![
            "import",
            file.to_str().unwrap(),
            "--service-address",
            "127.0.0.1:{port}",
            "--secrets-dir",
            dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        std::process::Command::new(WEIR)
            .args(args)
            .output()
            .unwrap()
    };
    let out = import(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("auth-url `https://$host/oauth2/auth` is not translated"),
        "{stderr}"
    );
    let converted = dir.join("weir.yaml");
    std::fs::write(&converted, &out.stdout).unwrap();
    let check = std::process::Command::new(WEIR)
        .args(["check", "-c", converted.to_str().unwrap()])
        .env("WEIR_LISTEN", "127.0.0.1:0")
        .env(
            "WEIR_STICKY_SECRET",
            "a sticky secret of at least 32 characters",
        )
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&check.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    // --strict: something was left out.
    assert_eq!(import(&["--strict"]).status.code(), Some(2));
}

/// An htpasswd line with a `{SHA}` hash.
fn htpasswd(user: &str, password: &str) -> String {
    use base64::Engine;
    use sha1::Digest;
    let digest = sha1::Sha1::digest(password.as_bytes());
    format!(
        "{user}:{{SHA}}{}\n",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}
