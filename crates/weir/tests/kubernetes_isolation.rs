//! `providers.kubernetes` between tenants (the attack review of issue 56): objects in a
//! namespace `evil` try to take a namespace `victim`'s hosts, certificate, passwords and
//! traffic, reach weir's own admin API, or take everyone's config down; each attempt is made
//! on a real API server and the victim's answers are checked over the wire.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::kube::{host_get, host_ip, KubeApi, ADMIN_TOKEN};
use common::origin::{http_origin_at, ok};
use common::process::{free_port, write_config};
use serde_json::{json, Value};

/// Waits until `host`'s `path` answers `status` with exactly `body` (any body when empty).
fn until_served(addr: SocketAddr, (host, path): (&str, &str), status: u16, body: &str) {
    let mut last = String::new();
    let start = std::time::Instant::now();
    loop {
        if let Some(r) = host_get(addr, host, path) {
            if r.status == status && (body.is_empty() || r.text() == body) {
                return;
            }
            last = format!("{} {}", r.status, r.text());
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{host}{path}: wanted {status} `{body}`, last: {last}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn service(ns: &str, origin: SocketAddr) -> [Value; 2] {
    [
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "app", "namespace": ns},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "app-1", "namespace": ns, "labels": {"kubernetes.io/service-name": "app"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": origin.port(), "protocol": "TCP"}],
            "endpoints": [{"addresses": [origin.ip().to_string()]}]}),
    ]
}

fn tls_secret(ns: &str, name: &str, cert: &common::tlskit::Issued) -> Value {
    use base64::Engine;
    let b64 = |p: &std::path::Path| {
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap())
    };
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": ns},
        "data": {"tls.crt": b64(&cert.cert), "tls.key": b64(&cert.key)}})
}

fn ingress(ns: &str, name: &str, annotations: Value, spec: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations}, "spec": spec})
}

/// An Ingress rule for `host`, `path` (of `kind`) to the namespace's `app`.
fn rule(host: &str, path: &str, kind: &str) -> Value {
    json!({"host": host, "http": {"paths": [{"path": path, "pathType": kind,
        "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}})
}

fn ca_of(pki: &common::tlskit::Pki) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let ca =
        rustls::pki_types::CertificateDer::from_pem_slice(&std::fs::read(pki.ca_file()).unwrap())
            .unwrap();
    common::tlskit::client_config(&ca, &["http/1.1"], None)
}

#[test]
fn one_namespace_cannot_take_another_s_hosts_secrets_traffic_or_config() {
    let Some(k) = KubeApi::start("isolation") else {
        return;
    };
    let ip = host_ip();
    let victim = http_origin_at(&format!("{ip}:0"), |_| ok("victim"));
    // Says what a header the tenant's route sets carried, when there is one.
    let attacker = http_origin_at(&format!("{ip}:0"), |r| {
        ok(&match r.header("x-leak") {
            Some(v) => format!("attacker {v}"),
            None => "attacker".to_string(),
        })
    });
    for ns in ["victim", "evil"] {
        k.create(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    for o in service("victim", victim.addr)
        .iter()
        .chain(service("evil", attacker.addr).iter())
    {
        k.create(o);
    }
    k.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "weir"}, "spec": {"controllerName": "weir.dev/gateway-controller"}}),
    );
    // The victim: a Gateway for shop.victim.test (HTTP and HTTPS), its route, an Ingress.
    let victim_pki = common::tlskit::Pki::new("isolation-victim");
    let victim_cert = victim_pki.issue("shop", "shop.victim.test", &["shop.victim.test"]);
    k.create(&tls_secret("victim", "victim-tls", &victim_cert));
    k.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "victim"},
        "spec": {"gatewayClassName": "weir", "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 80, "hostname": "shop.victim.test"},
            {"name": "https", "protocol": "HTTPS", "port": 443, "hostname": "shop.victim.test",
             "tls": {"certificateRefs": [{"name": "victim-tls"}]}}]}}),
    );
    k.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": "victim"},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["shop.victim.test"],
            "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]}}),
    );
    k.create(&ingress(
        "victim",
        "blog",
        json!({}),
        json!({"ingressClassName": "nginx", "rules": [rule("blog.victim.test", "/", "Prefix")]}),
    ));
    k.create(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "basic", "namespace": "victim"},
        "stringData": {"auth": "alice:{SHA}RZc8h1MOYe4GYnrcrHOtCFnb1Uk="}}));
    // Creation times have one-second steps: the victim's objects are older.
    std::thread::sleep(Duration::from_millis(1100));

    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen_tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    // The file also serves a key-value store, on a listener of its own.
    let kv_listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let file_text = |kv_size: &str| {
        format!(
            "admin:\n  address: {admin}\n# An upstream named as the provider names Service evil/clash's port 80.\nupstreams:\n  evil.clash.80: {{ servers: [\"127.0.0.1:9\"] }}\nkv_stores: {{ s: {{ max_size: {kv_size} }} }}\nlisteners:\n  - address: {kv_listen}\n    routes:\n      - match: {{ path_prefix: /kv/ }}\n        kv: {{ store: s }}\nproviders:\n  kubernetes:\n    kubeconfig: {}\n    listen: {listen}\n    listen_tls: {listen_tls}\n    secrets_dir: {}\n    debounce: 50ms\n",
            k.kubeconfig("isolation", ADMIN_TOKEN).display(),
            k.dir.join("secrets").display()
        )
    };
    let config = write_config("kubernetes-isolation", &file_text("1m"));
    // With a secret in its environment, as a pod's often is.
    let mut cmd = std::process::Command::new(common::process::WEIR);
    cmd.args(["run", "-c"])
        .arg(&config)
        .env("WEIR_LEAK_PROBE", "topsecret");
    let (weir, _) = common::process::spawn_serving(cmd);
    let kv_put = |key: &str| {
        common::roundtrip(
            &mut common::connect(kv_listen),
            format!("PUT /kv/{key} HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").as_bytes(),
        )
        .status
    };
    assert_eq!(kv_put("before"), 201);
    // The operator edits the file (the store's size) and has not reloaded yet; a tenant's
    // change that converts to the same config (a label) makes a rebuild that checks it against
    // the edited file and applies nothing. The running store is left alone (the attack review
    // of 2026-11-30: it was closed, every request to it 503).
    std::fs::write(&config, file_text("2m")).unwrap();
    let rebuilds = |admin: SocketAddr| {
        let m = common::get(admin, "/metrics").text();
        m.lines()
            .find(|l| l.starts_with("weir_kubernetes_rebuilds_total{outcome=\"converted\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = rebuilds(admin);
    k.patch(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "shop", "namespace": "victim"}}),
        &json!({"metadata": {"labels": {"poke": "1"}}}),
    );
    common::until("a rebuild", Duration::from_secs(30), || {
        rebuilds(admin) > before
    });
    assert_eq!(kv_put("during"), 201);
    until_served(listen, ("shop.victim.test", "/"), 200, "victim");
    until_served(listen, ("blog.victim.test", "/"), 200, "victim");

    // 1. An ExternalName Service naming weir's own admin API: not followed.
    k.create(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "adm", "namespace": "evil"},
        "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": admin.port()}]}}));
    k.create(&ingress(
        "evil",
        "adm",
        json!({}),
        json!({"ingressClassName": "nginx", "rules": [
        {"host": "adm.evil.test", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "adm", "port": {"number": admin.port()}}}}]}}]}),
    ));
    until_served(listen, ("adm.evil.test", "/stats"), 503, "");
    // Nor through an auth-url: refused (503), the admin API never asked.
    k.create(&ingress(
        "evil",
        "ssrf",
        json!({"nginx.ingress.kubernetes.io/auth-url": format!("http://127.0.0.1:{}/status", admin.port())}),
        json!({"ingressClassName": "nginx", "rules": [rule("ssrf.evil.test", "/", "Prefix")]}),
    ));
    until_served(listen, ("ssrf.evil.test", "/"), 503, "");

    // 2. Another Gateway, newer, with a route for the victim's host: the host stays the
    //    victim's, the route is not accepted for it.
    k.create(&json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "mine", "namespace": "evil"},
        "spec": {"gatewayClassName": "weir", "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}));
    k.create(&json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "grab", "namespace": "evil"},
        "spec": {"parentRefs": [{"name": "mine"}], "hostnames": ["shop.victim.test", "blog.victim.test", "grab.evil.test"],
            "rules": [{"backendRefs": [{"name": "app", "port": 80}]}]}}));
    until_served(listen, ("grab.evil.test", "/"), 200, "attacker");
    for _ in 0..10 {
        assert_eq!(
            host_get(listen, "shop.victim.test", "/").unwrap().text(),
            "victim"
        );
        // Nor an older Ingress's host (the second review: a newer Gateway route took it).
        assert_eq!(
            host_get(listen, "blog.victim.test", "/x").unwrap().text(),
            "victim"
        );
    }
    // 2b. A header value naming an environment variable is not the process's value: the
    //     conversion writes `${` as `$${`, which the interpolation of the fragment undoes.
    let leak = |value: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "leak", "namespace": "evil"},
        "spec": {"parentRefs": [{"name": "mine"}], "hostnames": ["leak.evil.test"],
            "rules": [{"filters": [{"type": "RequestHeaderModifier",
                "requestHeaderModifier": {"set": [{"name": "x-leak", "value": value}]}}],
                "backendRefs": [{"name": "app", "port": 80}]}]}})
    };
    k.create(&leak("plain"));
    until_served(listen, ("leak.evil.test", "/"), 200, "attacker plain");
    k.patch(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "leak", "namespace": "evil"}}),
        &json!({"spec": leak("${WEIR_LEAK_PROBE}")["spec"]}),
    );
    // Converted again: `${…}` is then no variable weir knows at run time, so the route is
    // left out (404), and the process's value never reaches the tenant.
    common::until(
        "the leak route converted again",
        Duration::from_secs(30),
        || {
            let text = host_get(listen, "leak.evil.test", "/").unwrap().text();
            assert!(!text.contains("topsecret"), "{text}");
            text != "attacker plain"
        },
    );

    // 3. An Ingress with the victim's host, its own certificate for it and a more specific
    //    path: neither the path nor the certificate is taken.
    let evil_pki = common::tlskit::Pki::new("isolation-evil");
    k.create(&tls_secret(
        "evil",
        "evil-tls",
        &evil_pki.issue("cap", "shop.victim.test", &["shop.victim.test"]),
    ));
    k.create(&ingress("evil", "cap", json!({}), json!({"ingressClassName": "nginx",
        "tls": [{"hosts": ["shop.victim.test"], "secretName": "evil-tls"}],
        "rules": [rule("shop.victim.test", "/login", "Exact"), rule("cap.evil.test", "/", "Prefix")]})));
    until_served(listen, ("cap.evil.test", "/"), 200, "attacker");
    assert_eq!(
        host_get(listen, "shop.victim.test", "/login")
            .unwrap()
            .text(),
        "victim"
    );
    let victim_tls = ca_of(&victim_pki);
    let mut s = common::tlskit::connect(listen_tls, "shop.victim.test", &victim_tls)
        .expect("the victim's certificate, verified by the victim's CA");
    let r = common::tlskit::exchange(
        &mut s,
        "GET /login HTTP/1.1\r\nHost: shop.victim.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "victim");

    // 4. The victim's htpasswd Secret named from another namespace: refused, not a password
    //    oracle. 5. A canary of another namespace on the victim's host and path: left out.
    k.create(&ingress("evil", "steal",
        json!({"nginx.ingress.kubernetes.io/auth-type": "basic", "nginx.ingress.kubernetes.io/auth-secret": "victim/basic"}),
        json!({"ingressClassName": "nginx", "rules": [rule("oracle.evil.test", "/", "Prefix")]})));
    k.create(&ingress("evil", "canary",
        json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": "100"}),
        json!({"ingressClassName": "nginx", "rules": [rule("blog.victim.test", "/", "Prefix")]})));
    until_served(listen, ("oracle.evil.test", "/"), 503, "");
    for _ in 0..10 {
        assert_eq!(
            host_get(listen, "blog.victim.test", "/").unwrap().text(),
            "victim"
        );
    }

    // 6. An object the API accepts but weir's config cannot hold (a path with a space): that
    //    object is left out and told; everyone else's changes keep applying.
    k.create(&ingress(
        "evil",
        "bad",
        json!({}),
        json!({"ingressClassName": "nginx",
        "rules": [rule("bad.evil.test", "/a b", "ImplementationSpecific")]}),
    ));
    k.create(&ingress(
        "victim",
        "newsite",
        json!({}),
        json!({"ingressClassName": "nginx", "rules": [rule("new.victim.test", "/", "Prefix")]}),
    ));
    until_served(listen, ("new.victim.test", "/"), 200, "victim");
    let events = k.get("/api/v1/namespaces/evil/events");
    assert!(
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["involvedObject"]["name"] == "bad"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("does not compile"))),
        "{events:#}"
    );

    // 6b. An object whose config clashes only with the file's (an upstream of the same name):
    //     left out too, found by compiling with the file, not by the reload.
    for o in service("evil", attacker.addr) {
        let mut o = o;
        let named = if o["kind"] == "Service" {
            "clash"
        } else {
            "clash-1"
        };
        o["metadata"]["name"] = named.into();
        if o["kind"] == "EndpointSlice" {
            o["metadata"]["labels"]["kubernetes.io/service-name"] = "clash".into();
        }
        k.create(&o);
    }
    k.create(&ingress(
        "evil",
        "clash",
        json!({}),
        json!({"ingressClassName": "nginx",
        "rules": [{"host": "clash.evil.test", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "clash", "port": {"number": 80}}}}]}}]}),
    ));
    k.create(&ingress(
        "victim",
        "after",
        json!({}),
        json!({"ingressClassName": "nginx", "rules": [rule("after.victim.test", "/", "Prefix")]}),
    ));
    until_served(listen, ("after.victim.test", "/"), 200, "victim");
    assert_eq!(
        host_get(listen, "clash.evil.test", "/").unwrap().status,
        404
    );

    // 7. A certificate Secret rotated to garbage: its Ingress is left out, the rest (and a
    //    reload of the file) keeps working.
    k.create(&tls_secret(
        "evil",
        "own",
        &evil_pki.issue("own", "own.evil.test", &["own.evil.test"]),
    ));
    k.create(&ingress(
        "evil",
        "owned",
        json!({"nginx.ingress.kubernetes.io/ssl-redirect": "false"}),
        json!({"ingressClassName": "nginx",
        "tls": [{"hosts": ["own.evil.test"], "secretName": "own"}],
        "rules": [rule("own.evil.test", "/", "Prefix")]}),
    ));
    until_served(listen, ("own.evil.test", "/"), 200, "attacker");
    k.patch(
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "own", "namespace": "evil"}}),
        &json!({"data": {"tls.crt": "Z2FyYmFnZQ==", "tls.key": "Z2FyYmFnZQ=="}}),
    );
    until_served(listen, ("own.evil.test", "/"), 404, "");
    let r = common::roundtrip(
        &mut common::connect(admin),
        b"POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(kv_put("after"), 201);
    let mut s = common::tlskit::connect(listen_tls, "shop.victim.test", &victim_tls).unwrap();
    let r = common::tlskit::exchange(
        &mut s,
        "GET / HTTP/1.1\r\nHost: shop.victim.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "victim");

    // The victim's Gateway stayed programmed; the stolen route's parent is not accepted.
    let gw = k.get("/apis/gateway.networking.k8s.io/v1/namespaces/victim/gateways/gw");
    let programmed = gw["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Programmed")
        .unwrap();
    assert_eq!(programmed["status"], "True", "{gw:#}");
    drop((weir, victim, attacker));
}
