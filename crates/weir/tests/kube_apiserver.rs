//! The ground of issue 56 §3: a real `kube-apiserver` (v1.36.3, built from the Go module proxy
//! through `tests/fixtures/kube-apiserver`; `.ci/run` installs it) on Debian's etcd 3.4, with
//! the Gateway API standard CRDs (v1.5.1, from that module's `config/crd/standard`) installed
//! over its API, and Gateway API objects created and read back. The provider that watches such
//! a server (issue 56 §1) is not built yet: this test is what its tests will start from.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::process::{free_port, have_all_or_skip, Running};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kube-apiserver");
const INSTALL: &str = "kube-apiserver v1.36.3: (cd crates/weir/tests/fixtures/kube-apiserver && go build -o /usr/local/bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver), as .ci/run does";
const TOKEN: &str = "weir-test-token-0123456789";

/// A request to the API server as the admin token's user; the response.
fn call(
    addr: SocketAddr,
    tls: &std::sync::Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> common::Response {
    let mut s = common::tlskit::connect(addr, "localhost", tls).unwrap();
    let body = body.unwrap_or("");
    common::tlskit::exchange(
        &mut s,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nAccept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
}

#[test]
fn the_test_api_server_runs_on_etcd_with_the_gateway_api_crds() {
    if !have_all_or_skip(&["kube-apiserver", "go"], INSTALL) {
        return;
    }
    let Some(etcd) = common::etcd::Etcd::start("kube") else {
        return;
    };
    // The CRDs: the module's files, where the Go module cache has them.
    let out = Command::new("go")
        .args(["list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api"])
        .current_dir(FIXTURE)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crds = std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
        .join("config/crd/standard");
    // Its serving certificate from a CA of the test's own; a token for an admin.
    let pki = common::tlskit::Pki::new("kube-apiserver");
    let cert = pki.issue("apiserver", "localhost", &["localhost"]);
    let dir = std::env::temp_dir().join(format!("weir-kube-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{TOKEN},admin,admin,system:masters\n"),
    )
    .unwrap();
    // Service account tokens: an RSA pair (the API server reads PKCS #1 and public keys).
    let sa = dir.join("sa.key");
    let sa_pub = dir.join("sa.pub");
    for args in [
        vec!["genrsa", "-out", sa.to_str().unwrap(), "2048"],
        vec![
            "rsa",
            "-in",
            sa.to_str().unwrap(),
            "-pubout",
            "-out",
            sa_pub.to_str().unwrap(),
        ],
    ] {
        let st = Command::new("openssl")
            .args(&args)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "openssl {args:?}");
    }
    let port = free_port();
    let child = Command::new("kube-apiserver")
        .arg(format!("--etcd-servers=http://{}", etcd.addr))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--tls-cert-file={}", cert.cert.display()))
        .arg(format!("--tls-private-key-file={}", cert.key.display()))
        .arg(format!("--service-account-key-file={}", sa_pub.display()))
        .arg(format!(
            "--service-account-signing-key-file={}",
            sa.display()
        ))
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg(format!(
            "--token-auth-file={}",
            dir.join("tokens.csv").display()
        ))
        .arg("--authorization-mode=RBAC")
        .arg("--service-cluster-ip-range=10.96.0.0/16")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("apiserver.log")).unwrap())
        .spawn()
        .unwrap();
    let mut server = Running(child);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let ca = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_slice(&std::fs::read(pki.ca_file()).unwrap())
            .unwrap()
    };
    let tls = common::tlskit::client_config(&ca, &["http/1.1"], None);
    // While it starts, connections are refused or reset: each probe is allowed to fail.
    let log = dir.join("apiserver.log");
    common::until("the API server is ready", Duration::from_secs(90), || {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "kube-apiserver exited ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            call(addr, &tls, "GET", "/readyz", None).status == 200
        }))
        .unwrap_or(false)
    });
    // The standard channel's CRDs, as `kubectl apply -f config/crd/standard` would send them.
    let mut installed = Vec::new();
    for entry in std::fs::read_dir(&crds).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            if v["kind"] != "CustomResourceDefinition" {
                continue;
            }
            let r = call(
                addr,
                &tls,
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                Some(&v.to_string()),
            );
            assert_eq!(r.status, 201, "{}: {}", path.display(), r.text());
            installed.push(v["metadata"]["name"].as_str().unwrap().to_string());
        }
    }
    for expected in [
        "gatewayclasses.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "grpcroutes.gateway.networking.k8s.io",
        "referencegrants.gateway.networking.k8s.io",
    ] {
        assert!(
            installed.iter().any(|n| n == expected),
            "{expected} not in {installed:?}"
        );
    }
    // Established, then a GatewayClass, a Gateway and an HTTPRoute created and read back.
    common::until("the CRDs are established", Duration::from_secs(60), || {
        let r = call(
            addr,
            &tls,
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/httproutes.gateway.networking.k8s.io",
            None,
        );
        r.text()
            .contains("\"type\":\"Established\",\"status\":\"True\"")
    });
    let r = call(
        addr,
        &tls,
        "POST",
        "/api/v1/namespaces",
        Some(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"web"}}"#),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    for (path, body) in [
        (
            "/apis/gateway.networking.k8s.io/v1/gatewayclasses",
            r#"{"apiVersion":"gateway.networking.k8s.io/v1","kind":"GatewayClass","metadata":{"name":"weir"},"spec":{"controllerName":"weir.dev/gateway-controller"}}"#,
        ),
        (
            "/apis/gateway.networking.k8s.io/v1/namespaces/web/gateways",
            r#"{"apiVersion":"gateway.networking.k8s.io/v1","kind":"Gateway","metadata":{"name":"edge","namespace":"web"},"spec":{"gatewayClassName":"weir","listeners":[{"name":"http","protocol":"HTTP","port":80}]}}"#,
        ),
        (
            "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes",
            r#"{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"shop","namespace":"web"},"spec":{"parentRefs":[{"name":"edge"}],"rules":[{"backendRefs":[{"name":"shop","port":8080}]}]}}"#,
        ),
    ] {
        let r = call(addr, &tls, "POST", path, Some(body));
        assert_eq!(r.status, 201, "{path}: {}", r.text());
    }
    let r = call(
        addr,
        &tls,
        "GET",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes/shop",
        None,
    );
    assert_eq!(r.status, 200);
    assert!(r.text().contains("\"parentRefs\""), "{}", r.text());
    // The CRDs' validation is the API server's: an HTTPRoute with a bad path type is refused.
    let r = call(
        addr,
        &tls,
        "POST",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes",
        Some(
            r#"{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"bad","namespace":"web"},"spec":{"rules":[{"matches":[{"path":{"type":"Glob","value":"/x"}}]}]}}"#,
        ),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    drop(etcd);
}
