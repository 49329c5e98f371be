#!/usr/bin/env python3
"""Opens N keep-alive connections, sends one request on each, reads the response, and holds them
open until stdin closes or a signal arrives. Prints "ready N" once all are established.
Used by the bench scripts to measure a server's memory per idle connection.
Usage: idle_conns.py PORT N PATH [tls]   (tls: TLS 1.3, ALPN http/1.1, certificate not verified)"""
import socket
import ssl
import sys

def main():
    port, count, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ctx = None
    if len(sys.argv) > 4 and sys.argv[4] == "tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.set_alpn_protocols(["http/1.1"])
    req = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    socks = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        if ctx is not None:
            s = ctx.wrap_socket(s, server_hostname="localhost")
        s.sendall(req)
        socks.append(s)
        if len(socks) % 500 == 0:
            drain(socks[-500:])
    drain(socks[len(socks) - len(socks) % 500:])
    print(f"ready {len(socks)}", flush=True)
    sys.stdin.read()

def drain(batch):
    for s in batch:
        s.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                raise SystemExit("server closed a connection")
            data += chunk

if __name__ == "__main__":
    main()
