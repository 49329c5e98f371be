//! `providers.kubernetes` against a real API server (issue 56 §1 and §3): weir runs outside
//! the cluster with a kubeconfig whose user is weir's service account, allowed in by the RBAC
//! shipped in `deploy/kubernetes/rbac.yaml` and nothing else; Services' EndpointSlices point at
//! origins on this machine's own address (the API refuses loopback endpoints; the origins bind
//! that address alone). Asserted over the wire and in the objects' status.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::kube::{host_get, host_ip, KubeApi, WEIR_TOKEN};
use common::origin::{http_origin_at, ok};
use common::process::{free_port, spawn_run, write_config};
use serde_json::{json, Value};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Waits until `host`'s `path` answers `status` with a body containing `body`.
fn until_served(addr: SocketAddr, (host, path): (&str, &str), status: u16, body: &str) {
    let mut last = String::new();
    let within = Duration::from_secs(30);
    let start = std::time::Instant::now();
    loop {
        if let Some(r) = host_get(addr, host, path) {
            if r.status == status && r.text().contains(body) {
                return;
            }
            last = format!("{} {}", r.status, r.text());
        }
        assert!(
            start.elapsed() < within,
            "{host}{path}: wanted {status} with `{body}`, last answer: {last}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn service(ns: &str, name: &str, port: u16) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP"}]}})
}

fn slice(ns: &str, name: &str, service: &str, origin: SocketAddr, ready: bool) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": origin.port(), "protocol": "TCP"}],
        "endpoints": [{"addresses": [origin.ip().to_string()], "conditions": {"ready": ready}}]})
}

/// The condition `kind` of a status's `conditions`.
fn condition<'a>(conditions: &'a Value, kind: &str) -> &'a Value {
    conditions
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// Waits until `probe` holds on the object at `path`.
fn until_object(k: &KubeApi, what: &str, path: &str, probe: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let start = std::time::Instant::now();
    loop {
        if let Some(r) = k.try_call("GET", path, None).filter(|r| r.status == 200) {
            last = serde_json::from_slice(&r.body).unwrap();
            if probe(&last) {
                return last;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(45),
            "{what}: {path} is {last:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn gateways_routes_and_ingresses_are_served_and_their_status_written() {
    let Some(mut k) = KubeApi::start("provider") else {
        return;
    };
    // The shipped RBAC, and nothing more, for weir's service account.
    k.create_yaml(
        &std::fs::read_to_string(format!("{REPO}/deploy/kubernetes/namespace.yaml")).unwrap(),
    );
    k.create_yaml(&std::fs::read_to_string(format!("{REPO}/deploy/kubernetes/rbac.yaml")).unwrap());
    k.create_yaml(
        &std::fs::read_to_string(format!("{REPO}/deploy/kubernetes/gatewayclass.yaml")).unwrap(),
    );
    let bind = format!("{}:0", host_ip());
    let shop = http_origin_at(&bind, |_| ok("shop answers"));
    let api = http_origin_at(&bind, |r| ok(&format!("api answers {}", r.line)));
    let other = http_origin_at(&bind, |_| ok("other namespace"));
    for ns in ["web", "team"] {
        k.create(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    k.create(&service("web", "shop", 8080));
    k.create(&slice("web", "shop-1", "shop", shop.addr, true));
    k.create(&service("web", "api", 9000));
    k.create(&slice("web", "api-1", "api", api.addr, true));
    k.create(&service("team", "other", 8080));
    k.create(&slice("team", "other-1", "other", other.addr, true));
    let gateway = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": "web"},
        "spec": {"gatewayClassName": "weir", "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 80},
            {"name": "https", "protocol": "HTTPS", "port": 443, "hostname": "secure.test",
             "tls": {"certificateRefs": [{"name": "site-tls"}]}},
            {"name": "tcp", "protocol": "TCP", "port": 9000},
            // Takes GRPCRoutes only, and names a kind no listener serves.
            {"name": "grpc-only", "protocol": "HTTP", "port": 80, "hostname": "grpc-only.test",
             "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}, {"kind": "FooRoute"}]}}]}});
    k.create(&gateway);
    k.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "wrong-kind", "namespace": "web"},
        "spec": {"parentRefs": [{"name": "edge", "sectionName": "grpc-only"}],
            "rules": [{"backendRefs": [{"name": "shop", "port": 8080}]}]}}),
    );
    // The HTTPS listener's certificate, a Secret of type kubernetes.io/tls.
    let pki = common::tlskit::Pki::new("kubernetes-provider");
    let cert = pki.issue("secure", "secure.test", &["secure.test"]);
    {
        use base64::Engine;
        let b64 = |p: &std::path::Path| {
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap())
        };
        k.create(
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "site-tls", "namespace": "web"},
            "data": {"tls.crt": b64(&cert.cert), "tls.key": b64(&cert.key)}}),
        );
    }
    k.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "secure", "namespace": "web"},
        "spec": {"parentRefs": [{"name": "edge", "sectionName": "https"}],
            "rules": [{"backendRefs": [{"name": "shop", "port": 8080}]}]}}),
    );
    let route = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": "web"},
        "spec": {"parentRefs": [{"name": "edge", "sectionName": "http"}], "hostnames": ["shop.test"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                       "backendRefs": [{"name": "shop", "port": 8080}]}]}});
    k.create(&route);
    // Another namespace's route: the listener takes its own namespace's only.
    let foreign = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "other", "namespace": "team"},
        "spec": {"parentRefs": [{"name": "edge", "namespace": "web"}], "hostnames": ["other.test"],
            "rules": [{"backendRefs": [{"name": "other", "port": 8080}]}]}});
    k.create(&foreign);
    // A route to a Service that does not exist.
    let missing = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "missing", "namespace": "web"},
        "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["missing.test"],
            "rules": [{"backendRefs": [{"name": "nowhere", "port": 80}]}]}});
    k.create(&missing);
    // An Ingress of class nginx.
    k.create(
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "api", "namespace": "web",
            "annotations": {"nginx.ingress.kubernetes.io/rewrite-target": "/$2"}},
        "spec": {"ingressClassName": "nginx", "rules": [{"host": "api.test", "http": {"paths": [
            {"path": "/v1(/|$)(.*)", "pathType": "ImplementationSpecific",
             "backend": {"service": {"name": "api", "port": {"name": "http"}}}}]}}]}}),
    );

    // One with a snippet weir does not translate: refused (503), and told on the object.
    k.create(&json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "snippet", "namespace": "web",
            "annotations": {"nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers \"X: y\";"}},
        "spec": {"ingressClassName": "nginx", "rules": [{"host": "snippet.test", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "api", "port": {"number": 9000}}}}]}}]}}));
    // One without a class: the default class's, maybe another controller's: not taken.
    k.create(
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "classless", "namespace": "web"},
        "spec": {"rules": [{"host": "classless.test", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "api", "port": {"number": 9000}}}}]}}]}}),
    );

    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen_tls = format!("127.0.0.1:{}", free_port());
    let kubeconfig = k.kubeconfig("weir", WEIR_TOKEN);
    let secrets = k.dir.join("secrets");
    let config = write_config(
        "kubernetes-provider",
        &format!(
            "admin:\n  address: 127.0.0.1:0\nproviders:\n  kubernetes:\n    kubeconfig: {}\n    listen: {listen}\n    listen_tls: {listen_tls}\n    secrets_dir: {}\n    addresses: [192.0.2.10]\n    lease: weir-system/weir-gateway-status\n    identity: replica-a\n    debounce: 50ms\n",
            kubeconfig.display(),
            secrets.display()
        ),
    );
    let (weir, admin) = spawn_run(&config);

    // Served: the route, the Ingress (its named port resolved, its path rewritten).
    until_served(listen, ("shop.test", "/cart"), 200, "shop answers");
    until_served(listen, ("api.test", "/v1/users"), 200, "GET /users");
    until_served(listen, ("snippet.test", "/"), 503, "");
    let r = host_get(listen, "classless.test", "/").unwrap();
    assert_eq!(r.status, 404, "{}", r.text());
    // The missing backend answers 500 (the specification's), the foreign route is not served.
    until_served(listen, ("missing.test", "/"), 500, "");
    let r = host_get(listen, "other.test", "/").unwrap();
    assert_ne!(r.text(), "other namespace");

    // The HTTPS listener: the Secret's certificate for its host, the route behind it.
    let ca = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_slice(&std::fs::read(pki.ca_file()).unwrap())
            .unwrap()
    };
    let tls = common::tlskit::client_config(&ca, &["http/1.1"], None);
    common::until("the HTTPS listener serves", Duration::from_secs(30), || {
        let Ok(mut s) = common::tlskit::connect(listen_tls.parse().unwrap(), "secure.test", &tls)
        else {
            return false;
        };
        let r = common::tlskit::exchange(
            &mut s,
            "GET / HTTP/1.1\r\nHost: secure.test\r\nConnection: close\r\n\r\n",
        );
        r.status == 200 && r.text() == "shop answers"
    });
    // The Secret's file is the owner's alone.
    // (Named by the Secret's content digest: `web.site-tls.<digest>.key`.)
    let key = std::fs::read_dir(secrets.join("tls"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("web.site-tls.") && n.ends_with(".key")
        })
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Status: the class accepted; the Gateway programmed with its address, the HTTP listener
    // with its two attached routes, the TCP listener refused with its reason.
    until_object(
        &k,
        "GatewayClass accepted",
        "/apis/gateway.networking.k8s.io/v1/gatewayclasses/weir",
        |o| condition(&o["status"]["conditions"], "Accepted")["status"] == "True",
    );
    let gw = until_object(
        &k,
        "Gateway programmed",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/gateways/edge",
        |o| condition(&o["status"]["conditions"], "Programmed")["status"] == "True",
    );
    assert_eq!(
        gw["status"]["addresses"][0]["value"], "192.0.2.10",
        "{gw:#}"
    );
    let http = &gw["status"]["listeners"][0];
    assert_eq!(http["name"], "http");
    assert_eq!(http["attachedRoutes"], 2, "{gw:#}");
    assert_eq!(gw["status"]["listeners"][1]["attachedRoutes"], 1, "{gw:#}");
    let tcp = &gw["status"]["listeners"][2];
    assert_eq!(
        condition(&tcp["conditions"], "Accepted")["reason"],
        "UnsupportedProtocol",
        "{gw:#}"
    );
    // allowedRoutes.kinds: the kind it cannot serve refused (InvalidRouteKinds), the other
    // kept and served; the HTTPRoute naming it not attached, its host not served.
    let narrow = &gw["status"]["listeners"][3];
    assert_eq!(narrow["name"], "grpc-only", "{gw:#}");
    assert_eq!(
        narrow["supportedKinds"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"}]),
        "{gw:#}"
    );
    assert_eq!(
        condition(&narrow["conditions"], "ResolvedRefs")["reason"],
        "InvalidRouteKinds",
        "{gw:#}"
    );
    assert_eq!(
        condition(&narrow["conditions"], "Programmed")["status"],
        "True",
        "{gw:#}"
    );
    assert_eq!(narrow["attachedRoutes"], 0, "{gw:#}");
    let r = until_object(
        &k,
        "HTTPRoute wrong-kind status",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes/wrong-kind",
        |o| !o["status"]["parents"].is_null(),
    );
    assert_eq!(
        condition(&r["status"]["parents"][0]["conditions"], "Accepted")["reason"],
        "NotAllowedByListeners",
        "{r:#}"
    );
    assert_ne!(
        host_get(listen, "grpc-only.test", "/").unwrap().text(),
        "shop answers"
    );
    let generation = gw["metadata"]["generation"].as_i64().unwrap();
    assert_eq!(
        condition(&gw["status"]["conditions"], "Accepted")["observedGeneration"],
        generation
    );
    // Routes: accepted and resolved; the foreign one not allowed; the missing one unresolved.
    let r = until_object(
        &k,
        "HTTPRoute shop status",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes/shop",
        |o| !o["status"]["parents"].is_null(),
    );
    let p = &r["status"]["parents"][0];
    assert_eq!(p["controllerName"], "weir.dev/gateway-controller");
    assert_eq!(p["parentRef"]["sectionName"], "http");
    assert_eq!(
        condition(&p["conditions"], "Accepted")["status"],
        "True",
        "{r:#}"
    );
    assert_eq!(
        condition(&p["conditions"], "ResolvedRefs")["status"],
        "True",
        "{r:#}"
    );
    let r = until_object(
        &k,
        "HTTPRoute other status",
        "/apis/gateway.networking.k8s.io/v1/namespaces/team/httproutes/other",
        |o| !o["status"]["parents"].is_null(),
    );
    assert_eq!(
        condition(&r["status"]["parents"][0]["conditions"], "Accepted")["reason"],
        "NotAllowedByListeners",
        "{r:#}"
    );
    let r = until_object(
        &k,
        "HTTPRoute missing status",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes/missing",
        |o| !o["status"]["parents"].is_null(),
    );
    assert_eq!(
        condition(&r["status"]["parents"][0]["conditions"], "ResolvedRefs")["reason"],
        "BackendNotFound",
        "{r:#}"
    );
    // The status Lease is this replica's; a second replica serves too, and does not take it.
    let lease =
        k.get("/apis/coordination.k8s.io/v1/namespaces/weir-system/leases/weir-gateway-status");
    assert_eq!(lease["spec"]["holderIdentity"], "replica-a");
    let listen_b: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config_b = write_config(
        "kubernetes-provider-b",
        &format!(
            "admin:\n  address: 127.0.0.1:0\nproviders:\n  kubernetes:\n    kubeconfig: {}\n    listen: {listen_b}\n    listen_tls: 127.0.0.1:{}\n    secrets_dir: {}\n    lease: weir-system/weir-gateway-status\n    identity: replica-b\n    debounce: 50ms\n",
            kubeconfig.display(),
            free_port(),
            k.dir.join("secrets-b").display()
        ),
    );
    let (weir_b, admin_b) = spawn_run(&config_b);
    until_served(listen_b, ("shop.test", "/cart"), 200, "shop answers");

    // The Ingress's address; the snippet told as a Warning event on its Ingress.
    until_object(
        &k,
        "the Ingress's address",
        "/apis/networking.k8s.io/v1/namespaces/web/ingresses/api",
        |o| o["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.10",
    );
    until_object(
        &k,
        "the snippet's event",
        "/api/v1/namespaces/web/events",
        |o| {
            o["items"].as_array().into_iter().flatten().any(|e| {
                e["involvedObject"]["name"] == "snippet"
                    && e["involvedObject"]["kind"] == "Ingress"
                    && e["reason"] == "NotTranslated"
                    && e["type"] == "Warning"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("configuration-snippet"))
            })
        },
    );
    let classless = k.get("/apis/networking.k8s.io/v1/namespaces/web/ingresses/classless");
    assert!(
        classless["status"]["loadBalancer"]["ingress"].is_null(),
        "{classless:#}"
    );

    // Changes to a Service and EndpointSlice no object names are skipped, not converted.
    let metric = |series: &str| -> u64 {
        common::get(admin, "/metrics")
            .text()
            .lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .map(|v| v.trim().parse::<u64>().unwrap())
            })
            .unwrap_or(0)
    };
    let converted = "weir_kubernetes_rebuilds_total{outcome=\"converted\"} ";
    let skipped = "weir_kubernetes_rebuilds_total{outcome=\"skipped\"} ";
    let mut settled = metric(converted);
    common::until("the status writes settle", Duration::from_secs(20), || {
        std::thread::sleep(Duration::from_millis(700));
        let now = metric(converted);
        std::mem::replace(&mut settled, now) == now
    });
    let skipped_before = metric(skipped);
    k.create(&service("web", "unused", 7000));
    for ready in [true, false, true] {
        let s = slice("web", "unused-1", "unused", shop.addr, ready);
        if ready
            && k.try_call("GET", &KubeApi::path_of(&s), None)
                .is_some_and(|r| r.status == 404)
        {
            k.create(&s);
        } else {
            k.patch(&s, &json!({"endpoints": s["endpoints"]}));
        }
    }
    common::until(
        "unrelated changes are skipped",
        Duration::from_secs(20),
        || metric(skipped) > skipped_before,
    );
    assert_eq!(
        metric(converted),
        settled,
        "an unrelated change was converted"
    );

    // A change: a new rule (the generation moves, observedGeneration follows).
    let mut changed = route.clone();
    changed["spec"]["rules"] = json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}}], "backendRefs": [{"name": "api", "port": 9000}]},
        {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [{"name": "shop", "port": 8080}]}]);
    k.patch(
        &route,
        &json!({"spec": {"rules": changed["spec"]["rules"]}}),
    );
    until_served(listen, ("shop.test", "/api/x"), 200, "GET /api/x");
    until_object(
        &k,
        "observedGeneration follows",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes/shop",
        |o| {
            let g = o["metadata"]["generation"].as_i64().unwrap();
            g >= 2
                && condition(&o["status"]["parents"][0]["conditions"], "Accepted")
                    ["observedGeneration"]
                    == g
        },
    );
    // Endpoints: none ready is 503; ready again is served.
    let s = slice("web", "shop-1", "shop", shop.addr, false);
    k.patch(&s, &json!({"endpoints": s["endpoints"]}));
    until_served(listen, ("shop.test", "/"), 503, "");
    let s = slice("web", "shop-1", "shop", shop.addr, true);
    k.patch(&s, &json!({"endpoints": s["endpoints"]}));
    until_served(listen, ("shop.test", "/"), 200, "shop answers");

    // The API server goes away: the last config keeps serving.
    k.stop_server();
    for _ in 0..20 {
        let r = host_get(listen, "shop.test", "/").expect("still listening");
        assert_eq!(r.text(), "shop answers");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Meanwhile etcd's history is compacted: the revisions the watches held are gone, and
    // each watch expires (410 Gone) and lists again when the API server is back.
    let status: serde_json::Value =
        serde_json::from_str(&k.etcd.ctl(&["endpoint", "status", "-w", "json"]).unwrap()).unwrap();
    let revision = status[0]["Status"]["header"]["revision"].as_i64().unwrap();
    k.etcd.ctl(&["compact", &revision.to_string()]).unwrap();
    // It comes back (same etcd): the watches resume, a change made now is served.
    k.start_server();
    k.delete(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "missing", "namespace": "web"}}),
    );
    until_served(listen, ("missing.test", "/"), 404, "");
    until_served(listen, ("shop.test", "/"), 200, "shop answers");

    // The holder goes: the other replica takes the Lease once it expires (15 s), and writes
    // status from then on (a new route's).
    drop(weir);
    until_object(
        &k,
        "replica-b holds the Lease",
        "/apis/coordination.k8s.io/v1/namespaces/weir-system/leases/weir-gateway-status",
        |o| o["spec"]["holderIdentity"] == "replica-b",
    );
    k.create(&json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "late", "namespace": "web"},
        "spec": {"parentRefs": [{"name": "edge", "sectionName": "http"}], "hostnames": ["late.test"],
            "rules": [{"backendRefs": [{"name": "shop", "port": 8080}]}]}}));
    until_served(listen_b, ("late.test", "/"), 200, "shop answers");
    // The deleted route's series goes with it once no runtime holds it (a reload later than
    // the last connection of the runtimes that did: each round here is one more reload).
    let mut round = 0;
    common::until(
        "the deleted route's series goes",
        Duration::from_secs(30),
        || {
            let metrics = common::get(admin_b, "/metrics").text();
            assert!(metrics.contains("httproute.web.late"), "{metrics}");
            if !metrics.contains("httproute.web.missing") {
                return true;
            }
            round += 1;
            let host = format!("late{round}.test");
            k.patch(
                &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "late", "namespace": "web"}}),
                &json!({"spec": {"hostnames": ["late.test", host]}}),
            );
            until_served(listen_b, (host.as_str(), "/"), 200, "shop answers");
            false
        },
    );
    until_object(
        &k,
        "replica-b writes status",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes/late",
        |o| condition(&o["status"]["parents"][0]["conditions"], "Accepted")["status"] == "True",
    );
    drop(weir_b);
}

/// The example contract (`examples/kubernetes/`): its objects applied as the header says, weir
/// run on `weir.yaml` as written with `WEIR_KUBECONFIG`, `WEIR_LISTEN`, `WEIR_LISTEN_TLS`,
/// `WEIR_ADMIN` and `WEIR_SECRETS_DIR`; the route, its filters and the Ingress answer.
#[test]
fn the_kubernetes_example_serves_its_gateway_route_and_ingress() {
    let Some(k) = KubeApi::start("example") else {
        return;
    };
    let ip = host_ip();
    // The origins the EndpointSlices name: ports 9001 and 9002 of this machine's address.
    let shop = http_origin_at(&format!("{ip}:9001"), |r| {
        ok(&format!(
            "shop {} x-from={}",
            r.line,
            r.header("x-from").unwrap_or("-")
        ))
    });
    let api = http_origin_at(&format!("{ip}:9002"), |r| ok(&format!("api {}", r.line)));
    let dir = format!("{REPO}/examples/kubernetes");
    k.create_yaml(
        &std::fs::read_to_string(format!("{REPO}/deploy/kubernetes/gatewayclass.yaml")).unwrap(),
    );
    k.create_yaml(
        &std::fs::read_to_string(format!("{dir}/backends.yaml"))
            .unwrap()
            .replace("ORIGIN_IP", &ip.to_string()),
    );
    k.create_yaml(&std::fs::read_to_string(format!("{dir}/manifests.yaml")).unwrap());
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cmd = std::process::Command::new(common::process::WEIR);
    cmd.args(["run", "-c", &format!("{dir}/weir.yaml")])
        .env(
            "WEIR_KUBECONFIG",
            k.kubeconfig("example", common::kube::ADMIN_TOKEN),
        )
        .env("WEIR_LISTEN", listen.to_string())
        .env("WEIR_LISTEN_TLS", format!("127.0.0.1:{}", free_port()))
        .env("WEIR_ADMIN", "127.0.0.1:0")
        .env("WEIR_SECRETS_DIR", k.dir.join("secrets"));
    let (weir, _admin) = common::process::spawn_serving(cmd);
    until_served(
        listen,
        ("shop.example.test", "/cart"),
        200,
        "shop GET /cart HTTP/1.1 x-from=gateway",
    );
    let r = host_get(listen, "shop.example.test", "/old/page").unwrap();
    assert_eq!(r.status, 301, "{}", r.text());
    assert!(
        r.header("location").unwrap().ends_with("/new/page"),
        "{:?}",
        r.header("location")
    );
    until_served(
        listen,
        ("api.example.test", "/v1/users"),
        200,
        "api GET /users",
    );
    let gw = until_object(
        &k,
        "the example's Gateway programmed",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/gateways/edge",
        |o| {
            condition(&o["status"]["conditions"], "Programmed")["status"] == "True"
                && o["status"]["listeners"][0]["attachedRoutes"] == 1
        },
    );
    assert_eq!(gw["status"]["listeners"][0]["name"], "http");
    // A graceful stop gives the status Lease up (client-go's ReleaseOnCancel): another
    // replica takes it at once, not after 15 s. (A crash leaves it to expire: the first test.)
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/weir-gateway-status";
    let mut weir = weir;
    assert_eq!(
        k.get(lease_path)["spec"]["holderIdentity"],
        json!(format!("{}-{}", gethostname(), weir.id()))
    );
    // SAFETY: kill(2) with a live child's pid.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(weir.id() as libc::pid_t, libc::SIGTERM);
    }
    common::until("weir stopped", Duration::from_secs(20), || {
        weir.try_wait().unwrap().is_some()
    });
    let lease = k.get(lease_path);
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "not released: {lease:#}"
    );
    drop((weir, shop, api));
}

/// The host name, which weir's default identity starts with (a pod's name, in a cluster).
fn gethostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// A GRPCRoute to a grpc-go server (an EndpointSlice naming it): unary and server-streaming
/// calls through weir's plain listener (h2c), a call its method match does not take refused,
/// and the route's parent accepted.
#[test]
fn a_grpcroute_carries_grpc_go_calls() {
    let Some(k) = KubeApi::start("grpcroute") else {
        return;
    };
    let Some(origin) = common::grpcgo::GrpcServer::start_at(&format!("{}:0", host_ip())) else {
        return;
    };
    k.create_yaml(
        &std::fs::read_to_string(format!("{REPO}/deploy/kubernetes/gatewayclass.yaml")).unwrap(),
    );
    k.create(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rpc"}}));
    k.create(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": "rpc"},
        "spec": {"ports": [{"name": "grpc", "port": 50051, "protocol": "TCP"}]}}));
    k.create(&slice_named("rpc", "echo-1", "echo", "grpc", origin.addr));
    k.create(&json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": "rpc"},
        "spec": {"gatewayClassName": "weir", "listeners": [{"name": "h2c", "protocol": "HTTP", "port": 80}]}}));
    k.create(&json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
        "metadata": {"name": "echo", "namespace": "rpc"},
        "spec": {"parentRefs": [{"name": "edge"}],
            "rules": [
                {"matches": [{"method": {"service": "echo.Echo", "method": "Unary"}}],
                 "backendRefs": [{"name": "echo", "port": 50051}]},
                {"matches": [{"method": {"type": "RegularExpression", "service": "echo\\.Ech.", "method": "Server.*"}}],
                 "backendRefs": [{"name": "echo", "port": 50051}]}]}}));
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = write_config(
        "kubernetes-grpcroute",
        &format!(
            "admin:\n  address: 127.0.0.1:0\nproviders:\n  kubernetes:\n    kubeconfig: {}\n    listen: {listen}\n    listen_tls: 127.0.0.1:{}\n    secrets_dir: {}\n    debounce: 50ms\n",
            k.kubeconfig("grpc", common::kube::ADMIN_TOKEN).display(),
            free_port(),
            k.dir.join("secrets").display()
        ),
    );
    let (weir, _) = spawn_run(&config);
    let addr = listen.to_string();
    let start = std::time::Instant::now();
    loop {
        let (ok, out) =
            common::grpcgo::client(&["-addr", &addr, "-kind", "unary", "-timeout", "2s"]);
        if ok {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "unary through the GRPCRoute: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, out) = common::grpcgo::client(&["-addr", &addr, "-kind", "server"]);
    assert!(
        ok,
        "server stream through the GRPCRoute's regex match: {out}"
    );
    // Client streaming is no rule's method: not carried.
    let (ok, out) = common::grpcgo::client(&["-addr", &addr, "-kind", "client"]);
    assert!(!ok, "a method no rule matches: {out}");
    let r = until_object(
        &k,
        "GRPCRoute accepted",
        "/apis/gateway.networking.k8s.io/v1/namespaces/rpc/grpcroutes/echo",
        |o| condition(&o["status"]["parents"][0]["conditions"], "Accepted")["status"] == "True",
    );
    assert_eq!(
        condition(&r["status"]["parents"][0]["conditions"], "ResolvedRefs")["status"],
        "True"
    );
    drop((weir, origin));
}

fn slice_named(ns: &str, name: &str, service: &str, port_name: &str, origin: SocketAddr) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": origin.port(), "protocol": "TCP"}],
        "endpoints": [{"addresses": [origin.ip().to_string()]}]})
}

/// A TLSRoute through a passthrough listener: the backend (`openssl s_server`) makes the
/// handshake with its own certificate, chosen by the ClientHello's server name; a name no
/// route takes is closed; the route's parent accepted, the listener's kinds TLSRoute.
#[test]
fn a_tlsroute_passes_tls_through_by_server_name() {
    let Some(k) = KubeApi::start("tlsroute") else {
        return;
    };
    let pki = common::tlskit::Pki::new("tlsroute-origin");
    let cert = pki.issue("pass", "pass.test", &["pass.test"]);
    let ip = host_ip();
    let port = free_port();
    let mut s_server = std::process::Command::new("openssl");
    s_server
        .args(["s_server", "-quiet", "-www", "-accept"])
        .arg(format!("{ip}:{port}"))
        .arg("-cert")
        .arg(&cert.cert)
        .arg("-key")
        .arg(&cert.key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _origin = common::process::Running(s_server.spawn().unwrap());
    common::until("openssl s_server listens", Duration::from_secs(10), || {
        std::net::TcpStream::connect((ip, port)).is_ok()
    });
    k.create_yaml(
        &std::fs::read_to_string(format!("{REPO}/deploy/kubernetes/gatewayclass.yaml")).unwrap(),
    );
    k.create(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pass"}}));
    k.create(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "tls", "namespace": "pass"},
        "spec": {"ports": [{"name": "tls", "port": 443, "protocol": "TCP"}]}}));
    k.create(&slice_named(
        "pass",
        "tls-1",
        "tls",
        "tls",
        SocketAddr::new(ip, port),
    ));
    k.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": "pass"},
        "spec": {"gatewayClassName": "weir", "listeners": [
            {"name": "pass", "protocol": "TLS", "port": 443, "tls": {"mode": "Passthrough"}}]}}),
    );
    k.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute",
        "metadata": {"name": "pass", "namespace": "pass"},
        "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["pass.test"],
            "rules": [{"backendRefs": [{"name": "tls", "port": 443}]}]}}),
    );
    // An HTTPRoute naming the passthrough listener is not attached to it.
    k.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "wrong", "namespace": "pass"},
        "spec": {"parentRefs": [{"name": "edge", "sectionName": "pass"}],
            "rules": [{"backendRefs": [{"name": "tls", "port": 443}]}]}}),
    );
    let passthrough: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = write_config(
        "kubernetes-tlsroute",
        &format!(
            "admin:\n  address: 127.0.0.1:0\nproviders:\n  kubernetes:\n    kubeconfig: {}\n    listen: 127.0.0.1:{}\n    listen_tls: 127.0.0.1:{}\n    listen_passthrough: {passthrough}\n    secrets_dir: {}\n    debounce: 50ms\n",
            k.kubeconfig("tls", common::kube::ADMIN_TOKEN).display(),
            free_port(),
            free_port(),
            k.dir.join("secrets").display()
        ),
    );
    let (weir, _) = spawn_run(&config);
    let tls = {
        use rustls::pki_types::pem::PemObject;
        let ca = rustls::pki_types::CertificateDer::from_pem_slice(
            &std::fs::read(pki.ca_file()).unwrap(),
        )
        .unwrap();
        common::tlskit::client_config(&ca, &["http/1.1"], None)
    };
    // The origin's own certificate, verified by its CA: weir never held it.
    common::until(
        "the TLSRoute passes TLS through",
        Duration::from_secs(30),
        || {
            let Ok(mut s) = common::tlskit::connect(passthrough, "pass.test", &tls) else {
                return false;
            };
            use std::io::{Read, Write};
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            out.starts_with(b"HTTP/1.0 200 ok")
        },
    );
    assert!(
        common::tlskit::connect(passthrough, "other.test", &tls).is_err(),
        "a server name no route takes is closed"
    );
    let r = until_object(
        &k,
        "TLSRoute accepted",
        "/apis/gateway.networking.k8s.io/v1/namespaces/pass/tlsroutes/pass",
        |o| condition(&o["status"]["parents"][0]["conditions"], "Accepted")["status"] == "True",
    );
    assert_eq!(
        condition(&r["status"]["parents"][0]["conditions"], "ResolvedRefs")["status"],
        "True"
    );
    let r = until_object(
        &k,
        "the HTTPRoute not accepted",
        "/apis/gateway.networking.k8s.io/v1/namespaces/pass/httproutes/wrong",
        |o| !o["status"]["parents"].is_null(),
    );
    assert_eq!(
        condition(&r["status"]["parents"][0]["conditions"], "Accepted")["reason"],
        "NotAllowedByListeners",
        "{r:#}"
    );
    let gw = k.get("/apis/gateway.networking.k8s.io/v1/namespaces/pass/gateways/edge");
    assert_eq!(
        gw["status"]["listeners"][0]["supportedKinds"][0]["kind"], "TLSRoute",
        "{gw:#}"
    );
    assert_eq!(gw["status"]["listeners"][0]["attachedRoutes"], 1, "{gw:#}");
    drop(weir);
}
