#!/usr/bin/env bash
# Short fuzz runs of every target (nightly + cargo-fuzz): the request parser, the chunked decoder,
# the upstream response head, the cache's field parsers, ${VAR} interpolation and a FastCGI
# application's records and CGI head, HTTP/2 frames and HPACK header blocks, an HTTP/2 server
# connection's receiving side and a client connection's (what weir reads from HTTP/2 upstreams), gRPC-Web content types, base64 bodies and trace context, and
# Kubernetes manifests for `weir import`.
#   fuzz/run.sh            60 s per target
#   SECS=600 fuzz/run.sh   longer
# Crashes land in fuzz/artifacts/<target>/; new inputs grow fuzz/corpus/<target>/ (copied from
# a scratch directory so the checked-in seeds stay small).
set -euo pipefail
cd "$(dirname "$0")"
SECS=${SECS:-60}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
for t in request_parser chunked_decoder response_head cache_fields interpolate fastcgi_response h2_frames hpack_decoder h2_server h2_client grpc_trace import_manifests; do
  work=$(mktemp -d)
  cp corpus/$t/* "$work"/
  echo "== $t for ${SECS}s"
  cargo +nightly fuzz run "$t" "$work" -- -max_total_time="$SECS" -max_len=131072
  echo "$t: $(ls "$work" | wc -l) inputs in the working corpus ($work)"
done
