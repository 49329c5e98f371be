//! `weir import` of Kubernetes Ingress manifests (issue 56 §2, offline): the converted config
//! served, and each translated annotation checked over the wire against local origins (the
//! Services' addresses given by `--service-address 127.0.0.1:{port}`); what is not translated
//! listed per object, and restricting annotations left untranslated refuse.
#![allow(clippy::unwrap_used)]

use crate::common;

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
        dir.join("auth/web.users.htpasswd"),
        htpasswd("bob", "s3cret"),
    )
    .unwrap();
    let file = dir.join("ingress.yaml");
    std::fs::write(&file, manifest(a.addr, b.addr, c.addr, auth.addr)).unwrap();
    let opts = weir::import::ingress::Options {
        class: "nginx".into(),
        service_address: "127.0.0.1:{port}".into(),
        secrets_dir: dir.display().to_string(),
        cluster: None,
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

    // Prefix is by whole segments; Exact is exact; what none of a host's paths takes goes
    // to its Ingress's default backend, and an unknown host gets 404.
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
    assert_eq!(get(addr, "nobody.test", "/").status, 404);
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
    assert_eq!(get(addr, "elsewhere.test", "/").status, 404);
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
        dir.join("auth/web.users.htpasswd"),
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

/// The attack review's cases (issue 56): a host keeps its own routes (a host-less or wildcard
/// route never takes its paths, nor an unmatched path), TLS is the host's whatever Ingress
/// names it, `use-regex` is the host's, `allowlist-source-range` and booleans as ingress-nginx
/// reads them, merged annotations kept, aliases never take a host, the older Ingress keeps a
/// path, an empty allow list fails closed. Each case once served what ingress-nginx refuses.
#[test]
fn hosts_keep_their_own_routes_as_ingress_nginx_does() {
    let (one, two) = (named("one"), named("two"));
    let dir = std::env::temp_dir().join(format!("weir-ingress-hosts-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("auth")).unwrap();
    std::fs::create_dir_all(dir.join("tls")).unwrap();
    std::fs::write(
        dir.join("auth/web.users.htpasswd"),
        htpasswd("bob", "s3cret"),
    )
    .unwrap();
    let pki = common::tlskit::Pki::new("ingress-hosts");
    let cert = pki.issue("site", "tls.test", &["tls.test"]);
    std::fs::copy(&cert.cert, dir.join("tls/web.site-tls.crt")).unwrap();
    std::fs::copy(&cert.key, dir.join("tls/web.site-tls.key")).unwrap();
    let (p1, p2) = (one.addr.port(), two.addr.port());
    let be = |port: u16| format!("{{ service: {{ name: s, port: {{ number: {port} }} }} }}");
    let ing = |name: &str, annotations: &str, spec: &str| {
        format!("---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: web\n  annotations: {{ {annotations} }}\nspec:\n  ingressClassName: nginx\n{spec}\n")
    };
    let rule = |host: &str, paths: &[(&str, &str, String)]| {
        let mut s = format!("    - host: {host}\n      http:\n        paths:\n");
        for (path, kind, backend) in paths {
            s += &format!(
                "          - {{ path: '{path}', pathType: {kind}, backend: {backend} }}\n"
            );
        }
        s
    };
    let basic = "nginx.ingress.kubernetes.io/auth-type: basic, nginx.ingress.kubernetes.io/auth-secret: users";
    let only10 = "nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8";
    let rules =
        |host: &str, paths: &[(&str, &str, String)]| format!("  rules:\n{}", rule(host, paths));
    let mut m = String::new();
    // H1/H2: a host-less Exact /admin and / must not take shop.test's paths.
    m += &ing("catchall", "", &format!("  rules:\n    - http:\n        paths:\n          - {{ path: /admin, pathType: Exact, backend: {} }}\n          - {{ path: /, pathType: Prefix, backend: {} }}\n", be(p1), be(p1)));
    m += &ing(
        "shop",
        basic,
        &rules("shop.test", &[("/admin", "Prefix", be(p2))]),
    );
    // H3: TLS named by one Ingress, the host's login path by another.
    m += &ing(
        "site",
        "",
        &format!(
            "  tls: [{{ hosts: [tls.test], secretName: site-tls }}]\n{}",
            rules("tls.test", &[("/", "Prefix", be(p1))])
        ),
    );
    m += &ing(
        "login",
        basic,
        &rules("tls.test", &[("/login", "Prefix", be(p2))]),
    );
    // H4: use-regex on one Ingress of rx.test makes the other's path a regex, longest first.
    m += &ing(
        "public",
        "nginx.ingress.kubernetes.io/use-regex: 'true'",
        &rules(
            "rx.test",
            &[("/v[0-9]+/docs", "ImplementationSpecific", be(p1))],
        ),
    );
    m += &ing(
        "internal",
        only10,
        &rules("rx.test", &[("/v1/docs/internal", "Prefix", be(p2))]),
    );
    // H5: the current name of the allow list.
    m += &ing(
        "allow",
        "nginx.ingress.kubernetes.io/allowlist-source-range: 10.0.0.0/8",
        &rules("allow.test", &[("/", "Prefix", be(p1))]),
    );
    // H6: `True` is a canary.
    m += &ing(
        "main",
        only10,
        &rules("app.test", &[("/", "Prefix", be(p1))]),
    );
    m += &ing("canary", "nginx.ingress.kubernetes.io/canary: 'True', nginx.ingress.kubernetes.io/canary-by-header: x-canary", &rules("app.test", &[("/", "Prefix", be(p2))]));
    // M1: annotations through a YAML merge key.
    m += &format!("---\nx-anchors: &guard {{ nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8 }}\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: merged\n  namespace: web\n  annotations: {{ <<: *guard }}\nspec:\n  ingressClassName: nginx\n{}", rules("merged.test", &[("/", "Prefix", be(p1))]));
    // M2: an alias naming another Ingress's host is dropped.
    m += &ing(
        "www",
        "nginx.ingress.kubernetes.io/server-alias: guarded.test",
        &rules("www.test", &[("/", "Prefix", be(p1))]),
    );
    m += &ing(
        "guarded",
        only10,
        &rules("guarded.test", &[("/", "Prefix", be(p2))]),
    );
    // M3: the older Ingress keeps a path, whatever the file's order.
    m += &ing("newer", "", &rules("d.test", &[("/", "Prefix", be(p1))])).replace(
        "  name: newer\n",
        "  name: newer\n  creationTimestamp: '2026-02-01T00:00:00Z'\n",
    );
    m += &ing(
        "older",
        only10,
        &rules("d.test", &[("/", "Prefix", be(p2))]),
    )
    .replace(
        "  name: older\n",
        "  name: older\n  creationTimestamp: '2025-01-01T00:00:00Z'\n",
    );
    // A snippet weir cannot read: refused, never served without what it said.
    m += &ing(
        "snip",
        "nginx.ingress.kubernetes.io/configuration-snippet: 'deny all;'",
        &rules("snip.test", &[("/", "Prefix", be(p1))]),
    );
    // M4: an empty allow list.
    m += &ing(
        "empty",
        "nginx.ingress.kubernetes.io/whitelist-source-range: ''",
        &rules("empty.test", &[("/", "Prefix", be(p1))]),
    );
    let file = dir.join("ingress.yaml");
    std::fs::write(&file, &m).unwrap();
    let opts = weir::import::ingress::Options {
        class: "nginx".into(),
        service_address: "127.0.0.1:{port}".into(),
        secrets_dir: dir.display().to_string(),
        cluster: None,
    };
    let imported = weir::import::kubernetes(&file, &opts).unwrap();
    let cfg = weir::runtime::load_str(&imported.yaml, &dir, |v| match v {
        "WEIR_LISTEN" | "WEIR_LISTEN_TLS" => Some("127.0.0.1:0".to_string()),
        _ => None,
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let handle = weir::server::start(cfg).unwrap();
    let (addr, tls) = (handle.local_addrs()[0], handle.local_addrs()[1]);
    let notes = imported.skipped.join("\n");
    assert_eq!(get(addr, "shop.test", "/admin").status, 401, "H1");
    assert_eq!(get(addr, "shop.test", "/other").status, 404, "H2");
    let ca = ca_der(&std::fs::read(pki.ca_file()).unwrap());
    let client = common::tlskit::client_config(&ca, &["http/1.1"], None);
    let mut s = common::tlskit::connect(tls, "tls.test", &client).unwrap();
    let r = common::tlskit::exchange(&mut s, "GET /login HTTP/1.1\r\nHost: tls.test\r\n\r\n");
    assert_eq!(r.status, 401, "H3: over TLS");
    assert_eq!(get(addr, "tls.test", "/login").status, 308, "H3: plain");
    assert_eq!(get(addr, "rx.test", "/v1/docs/internal").status, 403, "H4");
    assert_eq!(get(addr, "allow.test", "/").status, 403, "H5");
    assert_eq!(get(addr, "app.test", "/").status, 403, "H6");
    assert_eq!(get(addr, "merged.test", "/").status, 403, "M1");
    assert_eq!(get(addr, "guarded.test", "/").status, 403, "M2");
    assert!(
        notes.contains("server-alias guarded.test is a host of its own"),
        "{notes}"
    );
    assert_eq!(get(addr, "d.test", "/").status, 403, "M3");
    assert!(
        notes.contains("is Ingress web/older's (the older Ingress)"),
        "{notes}"
    );
    assert_eq!(get(addr, "empty.test", "/").status, 503, "M4");
    assert_eq!(
        get(addr, "snip.test", "/").status,
        503,
        "configuration-snippet"
    );
    common::inproc::stop(handle);
    drop((one, two));
}

/// The first certificate of a PEM file, as DER.
fn ca_der(pem: &[u8]) -> rustls::pki_types::CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem).unwrap()
}

/// `backend-protocol: GRPC` behind a TLS host (ALPN h2): grpc-go's client through weir to
/// grpc-go's server, and `proxy-read-timeout` bounding a slow origin (504 in ~1 s, not 4).
#[test]
fn backend_protocol_grpc_and_read_and_send_timeouts_over_the_wire() {
    let Some(grpc) = common::grpcgo::GrpcServer::start() else {
        return;
    };
    let slow = http_origin(|_| {
        std::thread::sleep(std::time::Duration::from_secs(4));
        common::origin::ok("late")
    });
    // Takes a request's head, then reads nothing more.
    let stalled = common::origin::origin(|mut c| {
        let _ = std::io::Read::read(&mut c, &mut [0u8; 4096]);
        std::thread::sleep(std::time::Duration::from_secs(20));
    });
    let dir = std::env::temp_dir().join(format!("weir-ingress-grpc-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("tls")).unwrap();
    let pki = common::tlskit::Pki::new("ingress-grpc");
    let cert = pki.issue("grpc", "grpc.test", &["grpc.test"]);
    std::fs::copy(&cert.cert, dir.join("tls/web.grpc-tls.crt")).unwrap();
    std::fs::copy(&cert.key, dir.join("tls/web.grpc-tls.key")).unwrap();
    let manifest = format!(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: grpc
  namespace: web
  annotations: {{ nginx.ingress.kubernetes.io/backend-protocol: GRPC }}
spec:
  ingressClassName: nginx
  tls: [{{ hosts: [grpc.test], secretName: grpc-tls }}]
  rules:
    - host: grpc.test
      http:
        paths: [{{ path: /, pathType: Prefix, backend: {{ service: {{ name: echo, port: {{ number: {} }} }} }} }}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: slow
  namespace: web
  annotations: {{ nginx.ingress.kubernetes.io/proxy-read-timeout: "1" }}
spec:
  ingressClassName: nginx
  rules:
    - host: slow.test
      http:
        paths: [{{ path: /, pathType: Prefix, backend: {{ service: {{ name: slow, port: {{ number: {} }} }} }} }}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: upload
  namespace: web
  annotations:
    nginx.ingress.kubernetes.io/proxy-send-timeout: "1"
    nginx.ingress.kubernetes.io/proxy-body-size: 256m
spec:
  ingressClassName: nginx
  rules:
    - host: upload.test
      http:
        paths: [{{ path: /, pathType: Prefix, backend: {{ service: {{ name: stalled, port: {{ number: {} }} }} }} }}]
"#,
        grpc.addr.port(),
        slow.addr.port(),
        stalled.addr.port()
    );
    let file = dir.join("ingress.yaml");
    std::fs::write(&file, manifest).unwrap();
    let opts = weir::import::ingress::Options {
        class: "nginx".into(),
        service_address: "127.0.0.1:{port}".into(),
        secrets_dir: dir.display().to_string(),
        cluster: None,
    };
    let imported = weir::import::kubernetes(&file, &opts).unwrap();
    let cfg = weir::runtime::load_str(&imported.yaml, &dir, |v| match v {
        "WEIR_LISTEN" | "WEIR_LISTEN_TLS" => Some("127.0.0.1:0".to_string()),
        _ => None,
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let handle = weir::server::start(cfg).unwrap();
    let (addr, tls) = (handle.local_addrs()[0], handle.local_addrs()[1]);
    let ca = pki.ca_file().display().to_string();
    let tls = tls.to_string();
    for kind in ["unary", "bidi"] {
        let (ok, out) = common::grpcgo::client(&[
            "-addr",
            &tls,
            "-kind",
            kind,
            "-ca",
            &ca,
            "-name",
            "grpc.test",
        ]);
        assert!(ok, "{kind}: {out}");
    }
    let started = std::time::Instant::now();
    let r = get(addr, "slow.test", "/");
    assert_eq!(r.status, 504);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // proxy-send-timeout: an upstream that stops reading an upload answers 504, in about the
    // annotation's second, not when the client gives up.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    let mut w = s.try_clone().unwrap();
    let started = std::time::Instant::now();
    let writer = std::thread::spawn(move || {
        const LEN: usize = 128 << 20;
        let head = format!("PUT / HTTP/1.1\r\nHost: upload.test\r\nContent-Length: {LEN}\r\n\r\n");
        let chunk = vec![b'x'; 1 << 16];
        let mut sent = 0;
        let _ = w.write_all(head.as_bytes());
        while sent < LEN {
            match w.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
    });
    let r = common::read_response(&mut s);
    assert_eq!(r.status, 504, "{r:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    drop(s);
    writer.join().unwrap();
    common::inproc::stop(handle);
    drop((grpc, slow, stalled));
}
