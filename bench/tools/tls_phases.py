#!/usr/bin/env python3
"""Requests over TLS keep-alive connections that never parked, or that parked first.

Usage: tls_phases.py PORT ADMIN_PORT SERVER_PID CONNS ROUNDS MODE
MODE fresh: CONNS connections, one request each, then ROUNDS requests on each at once (they
stay in their tasks, records by rustls). MODE woken: the same, but the ROUNDS start once every
connection has parked (`weir_connections_parked`), so their records are weir's own
(`tls/records.rs`). Requests go round-robin, one at a time. Prints the server's CPU µs per
request over the ROUNDS (user+sys from /proc/PID/stat) and requests/s. With CALLGRIND=PREFIX
in the environment (the server runs under callgrind, writing PREFIX.<pid>), prints its
user-space instructions per request over the ROUNDS instead (callgrind_control -z, then -d).
"""
import glob
import subprocess
import os
import socket
import ssl
import sys
import time
import urllib.request

port, admin, pid, conns, rounds, mode = sys.argv[1:7]
port, admin, conns, rounds = int(port), int(admin), int(conns), int(rounds)
TCK = os.sysconf("SC_CLK_TCK")
REQ = b"GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n"


def cpu_ticks():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def parked():
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics") as r:
        for line in r.read().decode().splitlines():
            if line.startswith("weir_connections_parked "):
                return float(line.split()[1])
    return 0.0


def exchange(s):
    s.sendall(REQ)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("connection closed")
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(65536)


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
socks = []
for _ in range(conns):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
    exchange(s)
    socks.append(s)
if mode == "woken":
    deadline = time.time() + 30
    while parked() < conns:
        if time.time() > deadline:
            raise SystemExit(f"only {parked()} of {conns} parked")
        time.sleep(0.1)
cg = os.environ.get("CALLGRIND")
if cg:
    subprocess.run(["callgrind_control", "-z", pid], capture_output=True, check=True)
t0, c0 = time.time(), cpu_ticks()
for _ in range(rounds):
    for s in socks:
        exchange(s)
t1, c1 = time.time(), cpu_ticks()
n = conns * rounds
if cg:
    subprocess.run(["callgrind_control", "-d", pid], capture_output=True, check=True)
    time.sleep(0.5)
    newest = max(glob.glob(f"{cg}.{pid}*"), key=os.path.getmtime)
    total = 0
    with open(newest) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    print(f"{total / n:.0f}")
else:
    print(f"{(c1 - c0) * 1e6 / TCK / n:.2f} {n / (t1 - t0):.0f}")
