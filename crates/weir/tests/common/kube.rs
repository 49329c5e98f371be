//! A real `kube-apiserver` (v1.36.3, built from the Go module proxy through
//! `tests/fixtures/kube-apiserver`; `.ci/run` installs it) on Debian's etcd, with the Gateway
//! API standard CRDs (v1.5.1, from that module's `config/crd/standard`) installed over its API.
//! Two static tokens: an admin (`system:masters`) for the tests, and one standing for weir's
//! service account (`system:serviceaccount:weir-system:weir`), which only the RBAC the test
//! applies lets in. Killed when dropped; `stop`/`start` restart it on the same etcd and port.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use super::process::{free_port, have_all_or_skip, Running};

pub const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kube-apiserver");
pub const INSTALL: &str = "kube-apiserver v1.36.3: (cd crates/weir/tests/fixtures/kube-apiserver && go build -o /usr/local/bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver), as .ci/run does";
pub const ADMIN_TOKEN: &str = "weir-test-token-0123456789";
/// weir's service account's token (the test's static stand-in for a projected one).
pub const WEIR_TOKEN: &str = "weir-sa-token-9876543210";

/// This machine's own address toward its default route (no packet is sent): where origins
/// named by EndpointSlices listen, since the API refuses loopback endpoint addresses ("may not
/// be in the loopback range"). Origins bind it alone, never every interface.
pub fn host_ip() -> std::net::IpAddr {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("192.0.2.254:9")
        .or_else(|_| s.connect("10.255.255.254:9"))
        .expect("a route other than loopback (the EndpointSlices' origins listen on it)");
    let ip = s.local_addr().unwrap().ip();
    assert!(
        !ip.is_loopback() && !ip.is_unspecified(),
        "no address other than loopback"
    );
    ip
}

pub struct KubeApi {
    pub addr: SocketAddr,
    pub dir: PathBuf,
    pub tls: Arc<rustls::ClientConfig>,
    pub ca_file: PathBuf,
    pub installed: Vec<String>,
    args: Vec<String>,
    server: Option<Running>,
    pub etcd: super::etcd::Etcd,
    _pki: super::tlskit::Pki,
}

impl KubeApi {
    /// Starts etcd and the API server and installs the CRDs; `None` (said why) only outside CI
    /// when a binary is missing.
    pub fn start(tag: &str) -> Option<KubeApi> {
        if !have_all_or_skip(&["kube-apiserver", "go"], INSTALL) {
            return None;
        }
        let etcd = super::etcd::Etcd::start(&format!("kube-{tag}"))?;
        let pki = super::tlskit::Pki::new(&format!("kube-apiserver-{tag}"));
        let cert = pki.issue("apiserver", "localhost", &["localhost"]);
        let dir = std::env::temp_dir().join(format!("weir-kube-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},admin,admin,system:masters\n{WEIR_TOKEN},system:serviceaccount:weir-system:weir,weir-uid,system:serviceaccounts\n"
            ),
        )
        .unwrap();
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
        let args = vec![
            format!("--etcd-servers=http://{}", etcd.addr),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", cert.cert.display()),
            format!("--tls-private-key-file={}", cert.key.display()),
            format!("--service-account-key-file={}", sa_pub.display()),
            format!("--service-account-signing-key-file={}", sa.display()),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--token-auth-file={}", dir.join("tokens.csv").display()),
            "--authorization-mode=RBAC".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
        ];
        let ca = {
            use rustls::pki_types::pem::PemObject;
            rustls::pki_types::CertificateDer::from_pem_slice(
                &std::fs::read(pki.ca_file()).unwrap(),
            )
            .unwrap()
        };
        let mut k = KubeApi {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            tls: super::tlskit::client_config(&ca, &["http/1.1"], None),
            ca_file: pki.ca_file(),
            dir,
            installed: Vec::new(),
            args,
            server: None,
            etcd,
            _pki: pki,
        };
        k.start_server();
        k.install_crds();
        Some(k)
    }

    /// Starts the API server (again), and waits until it is ready.
    pub fn start_server(&mut self) {
        let log = self.dir.join("apiserver.log");
        let child = Command::new("kube-apiserver")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        self.server = Some(Running(child));
        // While it starts, connections are refused or reset: each probe is allowed to fail.
        super::until("the API server is ready", Duration::from_secs(120), || {
            if let Some(Ok(Some(status))) = self.server.as_mut().map(|s| s.0.try_wait()) {
                panic!(
                    "kube-apiserver exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            self.try_call("GET", "/readyz", None)
                .is_some_and(|r| r.status == 200)
        });
    }

    /// Stops the API server (etcd keeps the objects).
    pub fn stop_server(&mut self) {
        self.server = None;
    }

    /// A request as the admin; `None` when the connection failed.
    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Option<super::Response> {
        std::net::TcpStream::connect(self.addr).ok()?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.call(method, path, body)
        }))
        .ok()
    }

    /// A request as the admin.
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> super::Response {
        let mut s = super::tlskit::connect(self.addr, "localhost", &self.tls).unwrap();
        let body = body.unwrap_or("");
        let ctype = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        super::tlskit::exchange(
            &mut s,
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: {ctype}\r\nAccept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
    }

    /// A GET, as JSON.
    pub fn get(&self, path: &str) -> serde_json::Value {
        let r = self.call("GET", path, None);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        serde_json::from_slice(&r.body).unwrap()
    }

    /// The collection path of an object (`apiVersion`, `kind`, `metadata.namespace`).
    pub fn collection(obj: &serde_json::Value) -> String {
        let api = obj["apiVersion"].as_str().unwrap();
        let kind = obj["kind"].as_str().unwrap().to_ascii_lowercase();
        let plural = if kind.ends_with('s') {
            format!("{kind}es")
        } else {
            format!("{kind}s")
        };
        let base = if api.contains('/') {
            format!("/apis/{api}")
        } else {
            format!("/api/{api}")
        };
        match obj["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{base}/namespaces/{ns}/{plural}"),
            None => format!("{base}/{plural}"),
        }
    }

    /// The path of an object.
    pub fn path_of(obj: &serde_json::Value) -> String {
        format!(
            "{}/{}",
            Self::collection(obj),
            obj["metadata"]["name"].as_str().unwrap()
        )
    }

    /// Creates `obj`.
    pub fn create(&self, obj: &serde_json::Value) {
        let r = self.call("POST", &Self::collection(obj), Some(&obj.to_string()));
        assert_eq!(r.status, 201, "{}: {}", Self::collection(obj), r.text());
    }

    /// Every object of a YAML text, created (`kubectl create -f`).
    pub fn create_yaml(&self, text: &str) {
        for doc in serde_yaml::Deserializer::from_str(text) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            if v.is_null() {
                continue;
            }
            self.create(&v);
        }
    }

    /// Replaces `obj`'s spec (a merge patch).
    pub fn patch(&self, obj: &serde_json::Value, patch: &serde_json::Value) {
        let path = Self::path_of(obj);
        let r = self.call("PATCH", &path, Some(&patch.to_string()));
        assert_eq!(r.status, 200, "PATCH {path}: {}", r.text());
    }

    /// Deletes `obj`.
    pub fn delete(&self, obj: &serde_json::Value) {
        let path = Self::path_of(obj);
        let r = self.call("DELETE", &path, None);
        assert_eq!(r.status, 200, "DELETE {path}: {}", r.text());
    }

    /// A kubeconfig for `token`'s user.
    pub fn kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let p = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://localhost:{}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: u\ncurrent-context: test\n",
                self.addr.port(),
                self.ca_file.display()
            ),
        )
        .unwrap();
        p
    }

    /// The Gateway API standard channel's CRDs, as `kubectl apply -f config/crd/standard`
    /// would send them; waits until they are established.
    fn install_crds(&mut self) {
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
        let crds = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
            .join("config/crd/standard");
        for entry in std::fs::read_dir(&crds).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
                if v["kind"] != "CustomResourceDefinition" {
                    continue;
                }
                let r = self.call(
                    "POST",
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    Some(&v.to_string()),
                );
                assert_eq!(r.status, 201, "{}: {}", path.display(), r.text());
                self.installed
                    .push(v["metadata"]["name"].as_str().unwrap().to_string());
            }
        }
        for crd in [
            "httproutes",
            "gateways",
            "gatewayclasses",
            "referencegrants",
        ] {
            super::until("the CRDs are established", Duration::from_secs(60), || {
                self.call(
                    "GET",
                    &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}.gateway.networking.k8s.io"),
                    None,
                )
                .text()
                .contains("\"type\":\"Established\",\"status\":\"True\"")
            });
        }
    }
}

/// A GET with `Host: host` on a fresh connection (`Connection: close`); `None` while nothing
/// listens or the answer cannot be read (the provider's listeners open with its first config).
pub fn host_get(addr: SocketAddr, host: &str, path: &str) -> Option<super::Response> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        super::read_response_to(&mut s, false)
    }))
    .ok()
}
