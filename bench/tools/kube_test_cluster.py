#!/usr/bin/env python3
"""The test API server, by hand: etcd and kube-apiserver (v1.36.3 from the Go module proxy,
which `.ci/run` installs) with the Gateway API standard CRDs, on 127.0.0.1, for trying
`providers.kubernetes` without a cluster (the README's Kubernetes recipe) and for the benches.

  kube_test_cluster.py up DIR          start both in the background; writes DIR/kubeconfig
  kube_test_cluster.py apply DIR FILE  create or replace every object of a YAML file
                                       (ORIGIN_IP replaced by this machine's address)
  kube_test_cluster.py get DIR PATH    GET an API path, as JSON
  kube_test_cluster.py down DIR        stop both and remove DIR
"""

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURE = os.path.join(ROOT, "crates/weir/tests/fixtures/kube-apiserver")
TOKEN = "weir-test-admin-token"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def host_ip():
    """This machine's address toward its default route (the API refuses loopback endpoints)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("192.0.2.254", 9))
    ip = s.getsockname()[0]
    s.close()
    return ip


class Api:
    """The API server as its admin."""

    def __init__(self, d):
        with open(os.path.join(d, "port")) as f:
            self.base = f"https://localhost:{f.read().strip()}"
        self.ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))

    def call(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Content-Type", ctype)

        def parsed(b):
            try:
                return json.loads(b or b"{}")
            except ValueError:
                return {"text": b.decode(errors="replace")}
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
                return r.status, parsed(r.read())
        except urllib.error.HTTPError as e:
            return e.code, parsed(e.read())

    def create(self, path, obj):
        status, body = self.call("POST", path, obj)
        if status != 201:
            sys.exit(f"POST {path}: {status} {body}")


def collection(obj):
    api, kind = obj["apiVersion"], obj["kind"].lower()
    plural = kind + ("es" if kind.endswith("s") else "s")
    base = f"/apis/{api}" if "/" in api else f"/api/{api}"
    ns = obj.get("metadata", {}).get("namespace")
    return f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"


def until(what, within, probe):
    end = time.time() + within
    while time.time() < end:
        if probe():
            return
        time.sleep(0.1)
    sys.exit(f"timed out: {what}")


def sh(*args):
    subprocess.run(list(args), check=True, capture_output=True)


def up(d):
    os.makedirs(d, exist_ok=True)
    ec, ep, port = free_port(), free_port(), free_port()
    etcd = subprocess.Popen(
        ["etcd", "--name=default", f"--data-dir={d}/etcd",
         f"--listen-client-urls=http://127.0.0.1:{ec}", f"--advertise-client-urls=http://127.0.0.1:{ec}",
         f"--listen-peer-urls=http://127.0.0.1:{ep}", f"--initial-advertise-peer-urls=http://127.0.0.1:{ep}",
         f"--initial-cluster=default=http://127.0.0.1:{ep}"],
        stdout=subprocess.DEVNULL, stderr=open(f"{d}/etcd.log", "w"), start_new_session=True)
    # A CA and a serving certificate it signs (rustls refuses a CA certificate as a server's).
    sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-keyout",
       f"{d}/ca.key", "-out", f"{d}/ca.crt", "-subj", "/CN=weir test CA")
    sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/api.key", "-out",
       f"{d}/api.csr", "-subj", "/CN=localhost")
    with open(f"{d}/ext", "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n")
    sh("openssl", "x509", "-req", "-in", f"{d}/api.csr", "-CA", f"{d}/ca.crt", "-CAkey", f"{d}/ca.key",
       "-CAcreateserial", "-days", "30", "-out", f"{d}/api.crt", "-extfile", f"{d}/ext")
    sh("openssl", "genrsa", "-out", f"{d}/sa.key", "2048")
    sh("openssl", "rsa", "-in", f"{d}/sa.key", "-pubout", "-out", f"{d}/sa.pub")
    with open(f"{d}/tokens.csv", "w") as f:
        f.write(f"{TOKEN},admin,admin,system:masters\n")
    api = subprocess.Popen(
        ["kube-apiserver", f"--etcd-servers=http://127.0.0.1:{ec}", "--bind-address=127.0.0.1",
         f"--secure-port={port}", f"--tls-cert-file={d}/api.crt", f"--tls-private-key-file={d}/api.key",
         f"--service-account-key-file={d}/sa.pub", f"--service-account-signing-key-file={d}/sa.key",
         "--service-account-issuer=https://kubernetes.default.svc", f"--token-auth-file={d}/tokens.csv",
         "--authorization-mode=RBAC", "--service-cluster-ip-range=10.96.0.0/16"],
        stdout=subprocess.DEVNULL, stderr=open(f"{d}/apiserver.log", "w"), start_new_session=True)
    with open(f"{d}/pids", "w") as f:
        f.write(f"{api.pid} {etcd.pid}\n")
    with open(f"{d}/port", "w") as f:
        f.write(str(port))
    a = Api(d)

    def ready():
        try:
            return a.call("GET", "/readyz")[0] == 200
        except OSError:
            return False
    until("the API server", 120, ready)
    crds = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api"],
                          cwd=FIXTURE, check=True, capture_output=True, text=True).stdout.strip()
    std = os.path.join(crds, "config/crd/standard")
    for name in sorted(os.listdir(std)):
        for doc in yaml.safe_load_all(open(os.path.join(std, name))):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                a.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
    until("the CRDs", 60, lambda: a.call("GET", "/apis/gateway.networking.k8s.io/v1/httproutes")[0] == 200)
    with open(f"{d}/kubeconfig", "w") as f:
        f.write(f"apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n"
                f"    server: https://localhost:{port}\n    certificate-authority: {d}/ca.crt\n"
                f"users:\n- name: admin\n  user:\n    token: {TOKEN}\ncontexts:\n- name: test\n"
                "  context:\n    cluster: test\n    user: admin\ncurrent-context: test\n")
    return f"{d}/kubeconfig"


def apply(d, path):
    a = Api(d)
    text = open(path).read().replace("ORIGIN_IP", host_ip())
    for obj in yaml.safe_load_all(text):
        if not obj:
            continue
        where = collection(obj)
        status, body = a.call("POST", where, obj)
        if status == 409:
            name = obj["metadata"]["name"]
            status, cur = a.call("GET", f"{where}/{name}")
            obj.setdefault("metadata", {})["resourceVersion"] = cur["metadata"]["resourceVersion"]
            status, body = a.call("PUT", f"{where}/{name}", obj)
        if status not in (200, 201):
            sys.exit(f"{obj['kind']} {obj['metadata'].get('name')}: {status} {body}")
        print(f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}: "
              f"{'created' if status == 201 else 'replaced'}")


def down(d):
    try:
        with open(f"{d}/pids") as f:
            for pid in f.read().split():
                try:
                    os.killpg(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    except FileNotFoundError:
        pass
    subprocess.run(["rm", "-rf", d])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, d = sys.argv[1], os.path.abspath(sys.argv[2])
    if cmd == "up":
        print(up(d))
    elif cmd == "apply":
        for p in sys.argv[3:]:
            apply(d, p)
    elif cmd == "get":
        print(json.dumps(Api(d).call("GET", sys.argv[3])[1], indent=2))
    elif cmd == "down":
        down(d)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
