#!/usr/bin/env python3
"""Local origin for the nginx corpus: echoes what it was asked, as JSON.

    origin.py NAME PORT

Every method on every path answers 200 with {"origin", "method", "path", "host", "hdr", "body_md5"}
("hdr": the request headers a proxy may set or drop). Special paths:
  /cc/...        adds Cache-Control: max-age=60 (and Expires) to check they pass through
  /redirect      302 to /elsewhere (proxy_redirect)
  /gone          410
  /status/NNN    answers NNN
An `Upgrade: websocket` request answers 101 with the echo in an X-Echo header, then closes.
Listens on 127.0.0.1 only.
"""
import hashlib
import json
import sys
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import time

NAME = sys.argv[1]
PORT = int(sys.argv[2])
ECHOED = ["x-real-ip", "x-forwarded-proto", "x-forwarded-port", "x-forwarded-host", "upgrade", "proxy"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "corpus-origin"

    def log_message(self, *args):
        pass

    def _echo(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        return {
            "origin": NAME,
            "method": self.command,
            "path": self.path,
            "host": self.headers.get("Host"),
            "hdr": {h: self.headers.get(h) for h in ECHOED if self.headers.get(h) is not None},
            "body_md5": hashlib.md5(body).hexdigest() if body else "-",
        }

    def _handle(self):
        echo = self._echo()
        if (self.headers.get("Upgrade") or "").lower() == "websocket":
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("X-Echo", json.dumps(echo, sort_keys=True))
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            return
        status = 200
        extra = []
        path = self.path.split("?")[0]
        if path.startswith("/cc/"):
            extra = [("Cache-Control", "max-age=60"), ("Expires", formatdate(time.time() + 60, usegmt=True))]
        elif path == "/redirect":
            status, extra = 302, [("Location", "/elsewhere")]
        elif path == "/gone":
            status = 410
        elif path.startswith("/status/"):
            try:
                status = int(path.split("/")[2])
            except ValueError:
                status = 400
        data = (json.dumps(echo, sort_keys=True) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _handle


if __name__ == "__main__":
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
