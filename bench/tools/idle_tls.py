#!/usr/bin/env python3
"""Opens N TLS keep-alive connections (TLS 1.3, ALPN http/1.1, certificate not verified), sends
one request on each, reads the response, and holds them open until stdin closes. Prints
"ready N" once all are established. Used by bench/tls.sh to measure a server's memory per idle
TLS connection; bench/tools/idle_conns.py is the plain-TCP twin."""
import socket
import ssl
import sys

def main():
    port, count, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols(["http/1.1"])
    req = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    socks = []
    for _ in range(count):
        raw = socket.create_connection(("127.0.0.1", port))
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        s.sendall(req)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                raise SystemExit("server closed a connection")
            data += chunk
        socks.append(s)
    print(f"ready {len(socks)}", flush=True)
    sys.stdin.read()

if __name__ == "__main__":
    main()
