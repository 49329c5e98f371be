#!/usr/bin/env python3
"""Reloads of providers.kubernetes under a burst of changes (issue 56 §1).

Starts etcd and kube-apiserver (the test API server: `.ci/run` installs it) with the Gateway
API standard CRDs, creates a Gateway and N HTTPRoutes (each its own host, one Service whose
EndpointSlice names an origin on this machine's address), starts weir (core 0) with
providers.kubernetes, waits until the last route answers, then runs `weir bench` (core 1)
against route 0 while CHANGES patches (one HTTPRoute each, a header value) are sent as fast as
the API takes them. It reports the rebuilds weir did (its "Kubernetes config applied" lines),
the CPU of weir's control loop over the burst (user+sys of its main thread, where the provider
converts and the config compiles; the workers serving the load are other threads) per rebuild, the rebuild times it
logged, and the failed requests of the load.

Usage: kube_reload.py WEIR ROUTES [ROUTES...]   (prints a markdown table row per count)
Environment: CHANGES (100), SUT_CORE (0), LOAD_CORE (1).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kube_test_cluster  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHANGES = int(os.environ.get("CHANGES", "100"))
SUT, LOAD = os.environ.get("SUT_CORE", "0"), os.environ.get("LOAD_CORE", "1")
TICK = os.sysconf("SC_CLK_TCK")


free_port = kube_test_cluster.free_port
host_ip = kube_test_cluster.host_ip


def cpu(pid):
    """user+sys seconds of weir's main thread: its control loop, where the provider converts
    and the config compiles (the workers serving the load are other threads)."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def get(port, host, path="/"):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
        s.close()
        return out
    except OSError:
        return b""


def until(what, within, probe):
    end = time.time() + within
    while time.time() < end:
        if probe():
            return
        time.sleep(0.05)
    sys.exit(f"timed out: {what}")


def main():
    weir = sys.argv[1]
    counts = [int(n) for n in sys.argv[2:]] or [80, 500, 2000]
    tmp = tempfile.mkdtemp(prefix="weir-kube-bench-")
    procs = []
    cluster = os.path.join(tmp, "cluster")
    try:
        kube_test_cluster.up(cluster)
        api = kube_test_cluster.Api(cluster)
        # The origin: a weir answering 200 on this machine's address (core 1).
        ip, oport = host_ip(), free_port()
        with open(f"{tmp}/origin.yaml", "w") as f:
            f.write(f"workers: 1\nlisteners:\n  - address: {ip}:{oport}\n    routes:\n      - respond: {{ status: 200, body: ok }}\n")
        procs.append(subprocess.Popen(["taskset", "-c", LOAD, weir, "run", "-c", f"{tmp}/origin.yaml"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        rows = []
        for n in counts:
            rows.append(run(api, weir, tmp, n, (ip, oport), cluster))
        print("| HTTPRoutes | changes | rebuilds | control-loop CPU over the burst, s | CPU per rebuild, ms | rebuild, ms (median, max) | first sync, s | requests during the burst | failed |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print("| " + " | ".join(str(x) for x in r) + " |")
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()
        kube_test_cluster.down(cluster)
        if os.environ.get("KEEP"):
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run(api, weir, tmp, n, origin, cluster):
    ns = f"bench{n}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    api.call("POST", "/apis/gateway.networking.k8s.io/v1/gatewayclasses", {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": {"name": "weir"},
        "spec": {"controllerName": "weir.dev/gateway-controller"}})
    api.create(f"/api/v1/namespaces/{ns}/services", {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "app", "namespace": ns},
               "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
    api.create(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "app-1", "namespace": ns, "labels": {"kubernetes.io/service-name": "app"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": origin[1], "protocol": "TCP"}],
        "endpoints": [{"addresses": [origin[0]], "conditions": {"ready": True}}]})
    api.create(f"/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/gateways", {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "edge", "namespace": ns},
        "spec": {"gatewayClassName": "weir", "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}})

    def route(i, rev=0):
        return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": f"r{i}", "namespace": ns},
                "spec": {"parentRefs": [{"name": "edge"}], "hostnames": [f"r{i}.{ns}.test"],
                         "rules": [{"filters": [{"type": "RequestHeaderModifier",
                                                 "requestHeaderModifier": {"set": [{"name": "x-rev", "value": str(rev)}]}}],
                                    "backendRefs": [{"name": "app", "port": 80}]}]}}
    for i in range(n):
        api.create(f"/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/httproutes", route(i))
    lport = free_port()
    log = f"{tmp}/weir-{n}.log"
    with open(f"{tmp}/weir-{n}.yaml", "w") as f:
        f.write(f"workers: 1\nproviders:\n  kubernetes:\n    kubeconfig: {cluster}/kubeconfig\n    listen: 127.0.0.1:{lport}\n"
                f"    listen_tls: 127.0.0.1:{free_port()}\n    secrets_dir: {tmp}/secrets\n    ingress_class: \"\"\n")
    started = time.time()
    w = subprocess.Popen(["taskset", "-c", SUT, weir, "run", "-c", f"{tmp}/weir-{n}.yaml"],
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        until(f"route r{n - 1} served", 300,
              lambda: get(lport, f"r{n - 1}.{ns}.test").startswith(b"HTTP/1.1 200"))
        first_sync = time.time() - started
        time.sleep(2)
        applied_before = open(log).read().count("Kubernetes config applied")
        bench = subprocess.Popen(["taskset", "-c", LOAD, weir, "bench", "-c", "20", "-d", "30s", "--format", "json",
                                  "-H", f"Host: r0.{ns}.test", f"http://127.0.0.1:{lport}/"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        time.sleep(1)
        c0 = cpu(w.pid)
        for k in range(CHANGES):
            body = {"spec": route(k % n, k + 1)["spec"]}
            if k == CHANGES - 1:
                body["spec"]["hostnames"].append(f"done.{ns}.test")
            status, out = api.call("PATCH", f"/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/httproutes/r{k % n}",
                                   body, "application/merge-patch+json")
            if status != 200:
                sys.exit(f"PATCH: {status} {out}")
        until("the last change served", 300,
              lambda: get(lport, f"done.{ns}.test").startswith(b"HTTP/1.1 200"))
        time.sleep(1)
        c1 = cpu(w.pid)
        out, _ = bench.communicate(timeout=60)
        text = open(log).read()
        rebuilds = text.count("Kubernetes config applied") - applied_before
        times = [int(m) for m in re.findall(r"Kubernetes config applied.*?ms=(\d+)", text)][applied_before:]
        times.sort()
        try:
            r = json.loads(out)[0]
            ok = sum(v for k, v in r["statuses"].items() if k.startswith("2"))
            e = r["errors"]
            failed = r["requests"] - ok + e["connect"] + e["read"] + e["write"] + e["timeout"]
            total = r["requests"]
        except Exception:
            total, failed = "?", "? (no report)"
        per = (c1 - c0) / rebuilds * 1000 if rebuilds else float("nan")
        med = times[len(times) // 2] if times else "?"
        return (n, CHANGES, rebuilds, f"{c1 - c0:.2f}", f"{per:.0f}", f"{med}, {times[-1] if times else '?'}",
                f"{first_sync:.1f}", total, failed)
    finally:
        w.kill()
        w.wait()


if __name__ == "__main__":
    main()
