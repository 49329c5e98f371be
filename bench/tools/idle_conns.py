#!/usr/bin/env python3
"""Opens N keep-alive connections, sends one request on each, reads the response, and holds them
open until stdin closes or a signal arrives. Prints "ready N" once all are established.
Used by the bench scripts to measure a server's memory per idle connection.
Usage: idle_conns.py PORT N PATH [tls|h2]   (tls: TLS 1.3, ALPN http/1.1, certificate not verified;
h2: TLS 1.3, ALPN h2, one GET on stream 1, the server's SETTINGS acknowledged)"""
import socket
import ssl
import struct
import sys

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

def h2_request(path):
    # HPACK: :method GET (2), :scheme https (7), :path literal (name 4), :authority localhost (name 1).
    p = path.encode()
    block = b"\x82\x87\x04" + bytes([len(p)]) + p + b"\x01\x09localhost"
    return PREFACE + frame(4, 0, 0) + frame(1, 0x5, 1, block)

def main():
    port, count, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ctx = None
    mode = sys.argv[4] if len(sys.argv) > 4 else "plain"
    if mode in ("tls", "h2"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.set_alpn_protocols(["h2" if mode == "h2" else "http/1.1"])
    req = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    global drain
    if mode == "h2":
        req = h2_request(path)
        drain = drain_h2
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

def drain_h2(batch):
    """Reads frames until stream 1 ends, acknowledging the server's SETTINGS."""
    for s in batch:
        s.settimeout(10)
        data = b""
        done = False
        while not done:
            while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
                n = int.from_bytes(data[:3], "big")
                kind, flags = data[3], data[4]
                stream = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
                if kind == 4 and not flags & 1:
                    s.sendall(frame(4, 1, 0))
                if stream == 1 and kind in (0, 1) and flags & 1:
                    done = True
                if kind == 7:
                    raise SystemExit("server sent GOAWAY")
                data = data[9 + n:]
            if done:
                break
            chunk = s.recv(16384)
            if not chunk:
                raise SystemExit("server closed a connection")
            data += chunk

if __name__ == "__main__":
    main()
