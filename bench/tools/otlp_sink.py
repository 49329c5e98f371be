#!/usr/bin/env python3
"""An OTLP/HTTP sink for benchmarks (bench/ab_weir.sh's trace rows): answers every
`POST /v1/traces` with 200 and an empty `ExportTraceServiceResponse` (a full success), over
keep-alive connections, and prints how many exports and bytes it took when stopped. Not a
collector: it reads nothing of the spans; the tests use a real Jaeger (tests/tracing_otlp.rs).

usage: otlp_sink.py PORT
"""
import http.server
import signal
import sys

exports = 0
received = 0


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global exports, received
        n = int(self.headers.get("Content-Length", "0"))
        received += len(self.rfile.read(n))
        exports += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def stop(*_):
    print(f"otlp_sink: {exports} exports, {received} bytes", file=sys.stderr)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)
server.serve_forever()
