//! The ground of issue 56 §3: a real `kube-apiserver` (v1.36.3, built from the Go module proxy
//! through `tests/fixtures/kube-apiserver`; `.ci/run` installs it) on Debian's etcd 3.4, with
//! the Gateway API standard CRDs (v1.5.1, from that module's `config/crd/standard`) installed
//! over its API (`common/kube.rs`), and Gateway API objects created and read back. The
//! provider's own tests (`kubernetes_provider.rs`) start from the same server; here, what it
//! offers them: the CRDs, their validation, and the server-side dry run that checks the
//! manifests weir ships (`deploy/kubernetes/`, as `kubectl apply --dry-run=server` sends them).
#![allow(clippy::unwrap_used)]

use crate::common;

use common::kube::KubeApi;

#[test]
fn the_test_api_server_runs_on_etcd_with_the_gateway_api_crds() {
    let Some(k) = KubeApi::start("apiserver") else {
        return;
    };
    for expected in [
        "gatewayclasses.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "grpcroutes.gateway.networking.k8s.io",
        "referencegrants.gateway.networking.k8s.io",
    ] {
        assert!(
            k.installed.iter().any(|n| n == expected),
            "{expected} not in {:?}",
            k.installed
        );
    }
    k.create_yaml(
        r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"web"}}
---
{"apiVersion":"gateway.networking.k8s.io/v1","kind":"GatewayClass","metadata":{"name":"weir"},"spec":{"controllerName":"weir.dev/gateway-controller"}}
---
{"apiVersion":"gateway.networking.k8s.io/v1","kind":"Gateway","metadata":{"name":"edge","namespace":"web"},"spec":{"gatewayClassName":"weir","listeners":[{"name":"http","protocol":"HTTP","port":80}]}}
---
{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"shop","namespace":"web"},"spec":{"parentRefs":[{"name":"edge"}],"rules":[{"backendRefs":[{"name":"shop","port":8080}]}]}}
"#,
    );
    let route = k.get("/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes/shop");
    assert_eq!(route["spec"]["parentRefs"][0]["name"], "edge");
    // The CRDs' validation is the API server's: an HTTPRoute with a bad path type is refused.
    let r = k.call(
        "POST",
        "/apis/gateway.networking.k8s.io/v1/namespaces/web/httproutes",
        Some(
            r#"{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"bad","namespace":"web"},"spec":{"rules":[{"matches":[{"path":{"type":"Glob","value":"/x"}}]}]}}"#,
        ),
    );
    assert_eq!(r.status, 422, "{}", r.text());
}

/// `deploy/kubernetes/`: every object accepted by the API server's validation in a dry run
/// (`?dryRun=All`, what `kubectl apply --dry-run=server` asks), in the order `kubectl apply -f
/// deploy/kubernetes/` would create them; a broken field is refused the same way.
#[test]
fn the_shipped_manifests_pass_a_server_side_dry_run() {
    let Some(k) = KubeApi::start("deploy") else {
        return;
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/kubernetes");
    // The namespace exists first (a dry run creates nothing the next objects could use).
    k.create_yaml(&std::fs::read_to_string(format!("{dir}/namespace.yaml")).unwrap());
    let mut kinds = Vec::new();
    for file in ["rbac.yaml", "gatewayclass.yaml", "deployment.yaml"] {
        let text = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            let path = format!(
                "{}?dryRun=All&fieldValidation=Strict",
                KubeApi::collection(&v)
            );
            let r = k.call("POST", &path, Some(&v.to_string()));
            assert_eq!(r.status, 201, "{file}: {path}: {}", r.text());
            kinds.push(v["kind"].as_str().unwrap().to_string());
        }
    }
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "GatewayClass",
        "ConfigMap",
        "Deployment",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} not in {kinds:?}");
    }
    // And as the operator runs it: `kubectl apply --dry-run=server -f deploy/kubernetes/`
    // (kubectl v1.36.3, built from the same module; `.ci/run` installs it).
    assert!(
        common::process::have_all_or_skip(&["kubectl"], "kubectl: (cd crates/weir/tests/fixtures/kube-apiserver && go build -o /usr/local/bin/kubectl k8s.io/kubernetes/cmd/kubectl), as .ci/run does"),
        "kubectl"
    );
    let out = std::process::Command::new("kubectl")
        .arg(format!(
            "--kubeconfig={}",
            k.kubeconfig("kubectl", common::kube::ADMIN_TOKEN).display()
        ))
        .args(["apply", "--dry-run=server", "-f", dir])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    for line in [
        "clusterrole.rbac.authorization.k8s.io/weir created (server dry run)",
        "deployment.apps/weir created (server dry run)",
        "gatewayclass.gateway.networking.k8s.io/weir created (server dry run)",
    ] {
        assert!(said.contains(line), "{line} not in {said}");
    }
    // Strict field validation: an unknown field in the Deployment is refused.
    let text = std::fs::read_to_string(format!("{dir}/deployment.yaml")).unwrap();
    let mut d: serde_json::Value = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .find(|v: &serde_json::Value| v["kind"] == "Deployment")
        .unwrap();
    d["spec"]["replicaz"] = 2.into();
    let path = format!(
        "{}?dryRun=All&fieldValidation=Strict",
        KubeApi::collection(&d)
    );
    let r = k.call("POST", &path, Some(&d.to_string()));
    assert_eq!(r.status, 400, "{}", r.text());
    // The ConfigMap's weir config loads (`weir check`), its environment as in a pod.
    let cm: serde_json::Value = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .find(|v: &serde_json::Value| v["kind"] == "ConfigMap")
        .unwrap();
    let config = common::process::write_config(
        "deploy-configmap",
        cm["data"]["weir.yaml"].as_str().unwrap(),
    );
    let out = std::process::Command::new(common::process::WEIR)
        .args(["check", "-c"])
        .arg(&config)
        .env("POD_NAME", "weir-0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
