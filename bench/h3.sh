#!/usr/bin/env bash
# HTTP/3 at the edge: weir next to Caddy (quic-go), each with the same ECDSA P-256 certificate,
# one worker (GOMAXPROCS=1 for Caddy) pinned to core 0; the load generator on core 1. Debian's
# HAProxy 2.6 and nginx 1.22 are built without QUIC, so Caddy is the peer. For each server:
#   1. HTTP/3, 100 connections x 10 streams, 1 KiB: weir bench --h3 (h2load in Debian has no
#      HTTP/3) — weir's cache hit and a 1 KiB static file, Caddy's static file (Caddy has no
#      cache in its standard build);
#   2. weir's own HTTP/2 over TLS in the same run (h2load -c 100 -m 10, 1 KiB cache hit), the
#      reference for "HTTP/3 costs at most 2x HTTP/2";
#   3. a new QUIC connection per request (full handshake): weir bench --h3 --close -c 20;
#   4. memory per idle HTTP/3 connection at IDLE connections (bench/tools/h3idle, quic-go);
#   5. weir sending a 1 MiB file over HTTP/3 with and without UDP GSO (`http3.segmentation_offload`).
# Usage: bench/h3.sh [SECONDS] [IDLE]   (results in bench/results/h3-<date>.md)
source "$(dirname "$0")/lib.sh"
SECS=${1:-8}
IDLE=${2:-2000}
ensure_pkgs nginx-light nghttp2-client python3 openssl
build_weir
raise_nofile
CADDY=${CADDY:-$(command -v caddy || echo "$HOME/go/bin/caddy")}
if [ ! -x "$CADDY" ]; then
  log "installing Caddy from the Go module proxy"
  go install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9
  CADDY="$(go env GOPATH)/bin/caddy"
fi
log "building bench/tools/h3idle (quic-go)"
(cd "$BENCH_DIR/tools/h3idle" && go build -o "$TMP/h3idle" .)
cd "$TMP"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -keyout key.pem -out cert.pem -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null

# The origin of weir's cache: a 1 KiB object, cacheable for an hour (nginx on the load core).
mkdir -p www/f && head -c 1024 /dev/zero | tr '\0' 'x' > www/s1024 && cp www/s1024 www/f/s1024
head -c 1048576 /dev/urandom > www/f/m1 && chmod -R a+rX "$TMP"
nginx_conf "$TMP/origin" <<NGX
  access_log off;
  default_type text/plain;
  server { listen 127.0.0.1:19410; root $TMP/www; expires 1h; }
NGX
start_nginx "$TMP/origin" "$LOAD_CORE"
wait_port 19410 "$TMP/origin/error.log"

weir_conf() { # port segmentation_offload
  cat <<YAML
workers: 1
limits: { max_requests_per_connection: 0 }
timeouts: { keepalive: 600s }
http3: { segmentation_offload: $2 }
cache_zones: { z: { max_size: 64m } }
upstreams: { o: { servers: ["127.0.0.1:19410"] } }
listeners:
  - address: 127.0.0.1:$1
    quic: true
    tls:
      certificates: [{ cert: $TMP/cert.pem, key: $TMP/key.pem }]
      protocols: [tls1.3]
    routes:
      - match: { path: /r }
        respond: { body: "$(head -c 1024 /dev/zero | tr '\0' 'x')" }
      - match: { path_prefix: /f/ }
        static: { root: $TMP/www/f }
      - proxy: { upstream: o }
        cache: { zone: z }
YAML
}
weir_conf 19411 true > weir.yaml
weir_conf 19413 false > weir-nogso.yaml
taskset -c "$SUT_CORE" "$WEIR" run -c weir.yaml >/dev/null 2>weir.log &
WEIR_PID=$!; track $WEIR_PID
wait_port 19411 weir.log

cat > Caddyfile <<CADDY
{
  admin off
  auto_https disable_redirects
  servers {
    protocols h1 h2 h3
  }
}
https://localhost:19412 {
  tls $TMP/cert.pem $TMP/key.pem
  respond /r "$(head -c 1024 /dev/zero | tr '\0' 'x')"
  root * $TMP/www
  file_server
}
CADDY
GOMAXPROCS=1 taskset -c "$SUT_CORE" "$CADDY" run --config Caddyfile --adapter caddyfile >caddy.log 2>&1 &
CADDY_PID=$!; track $CADDY_PID
wait_port 19412 caddy.log

# Warm weir's cache; check both serve HTTP/3.
for i in 1 2 3; do curl -sk https://localhost:19411/s1024 -o /dev/null; done
"$WEIR" bench --h3 -n 10 -c 1 "https://localhost:19411/s1024" >/dev/null
"$WEIR" bench --h3 -n 10 -c 1 "https://localhost:19412/f/s1024" >/dev/null

# weir bench on the load core (JSON); sets B_RPS, B_P99 (µs), B_HS (handshakes/s), B_ERR, B_N
# and B_CPU (server CPU µs per request).
run_bench() { # pid url args...
  local pid=$1 url=$2; shift 2
  local t0 t1
  t0=$(cpu_ticks "$pid")
  taskset -c "$LOAD_CORE" "$WEIR" bench -t 1 -d "${SECS}s" --format json "$@" "$url" > bench.json 2>bench.err || true
  t1=$(cpu_ticks "$pid")
  read -r B_RPS B_P99 B_HS B_ERR B_N B_MB < <(python3 -c '
import json
r = json.load(open("bench.json"))[0]
e = sum(r["errors"].values())
print("%.0f %.0f %.0f %d %d %.1f" % (r["requests_per_second"], r["latency_ms"]["p99"] * 1000,
      r["handshakes_per_second"], e, r["requests"], r.get("transfer_bytes", 0) / 1048576))' 2>/dev/null || echo "n/a n/a n/a n/a 0 0")
  B_CPU=$(awk -v d=$((t1 - t0)) -v r="${B_N:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", d * 1e6 / hz / r; else print "n/a" }')
}

declare -A ROW
log "HTTP/3, 100 connections x 10 streams"
run_bench "$WEIR_PID" https://localhost:19411/s1024 --h3 -c 100 --streams 10
ROW[weir.hit]="$B_RPS $B_CPU $B_P99 $B_ERR"
run_bench "$WEIR_PID" https://localhost:19411/f/s1024 --h3 -c 100 --streams 10
ROW[weir.file]="$B_RPS $B_CPU $B_P99 $B_ERR"
run_bench "$CADDY_PID" https://localhost:19412/f/s1024 --h3 -c 100 --streams 10
ROW[caddy.file]="$B_RPS $B_CPU $B_P99 $B_ERR"
run_bench "$WEIR_PID" https://localhost:19411/r --h3 -c 100 --streams 10
ROW[weir.respond]="$B_RPS $B_CPU $B_P99 $B_ERR"
run_bench "$CADDY_PID" https://localhost:19412/r --h3 -c 100 --streams 10
ROW[caddy.respond]="$B_RPS $B_CPU $B_P99 $B_ERR"
log "weir HTTP/2 over TLS, 100 x 10 (h2load)"
run_h2load "$WEIR_PID" https://localhost:19411/s1024 -c 100 -m 10
ROW[weir.h2]="$RPS $CPU_US n/a $FAILED"
run_h2load "$CADDY_PID" https://localhost:19412/f/s1024 -c 100 -m 10
ROW[caddy.h2]="$RPS $CPU_US n/a $FAILED"
# The same client for both protocols: weir bench --h2 (its HTTP/3 client is the same design).
run_bench "$WEIR_PID" https://localhost:19411/s1024 --h2 -c 100 --streams 10
ROW[weir.h2b]="$B_RPS $B_CPU $B_P99 $B_ERR"
log "a full QUIC handshake per request"
run_bench "$WEIR_PID" https://localhost:19411/s1024 --h3 --close -c 20
ROW[weir.hs]="$B_HS $B_CPU $B_ERR"
run_bench "$CADDY_PID" https://localhost:19412/f/s1024 --h3 --close -c 20
ROW[caddy.hs]="$B_HS $B_CPU $B_ERR"

log "idle HTTP/3 connections ($IDLE each)"
h3_idle_rss() { # pid port path
  local pid=$1 port=$2 path=$3 before after line
  before=$(rss_kib "$pid")
  coproc HOLD { taskset -c "$LOAD_CORE" "$TMP/h3idle" "$port" "$IDLE" "$path"; }
  read -r line <&"${HOLD[0]}"
  sleep "${IDLE_SETTLE:-3}"
  after=$(rss_kib "$pid")
  exec {HOLD[1]}>&-
  wait "$HOLD_PID" 2>/dev/null || true
  awk -v a="$before" -v b="$after" -v n="$IDLE" -v l="$line" 'BEGIN { if (l ~ /^ready/) printf "%.2f", (b - a) / n; else print "n/a" }'
}
ROW[weir.idle]=$(h3_idle_rss "$WEIR_PID" 19411 /s1024)
ROW[caddy.idle]=$(h3_idle_rss "$CADDY_PID" 19412 /f/s1024)

log "1 MiB over HTTP/3, GSO on and off (10 connections)"
run_bench "$WEIR_PID" https://localhost:19411/f/m1 --h3 -c 10
ROW[gso.on]="$B_RPS $B_CPU $B_P99 $B_ERR"
kill "$WEIR_PID"; wait "$WEIR_PID" 2>/dev/null || true
taskset -c "$SUT_CORE" "$WEIR" run -c weir-nogso.yaml >/dev/null 2>weir-nogso.log &
NOGSO_PID=$!; track $NOGSO_PID
wait_port 19413 weir-nogso.log
run_bench "$NOGSO_PID" https://localhost:19413/f/m1 --h3 -c 10
ROW[gso.off]="$B_RPS $B_CPU $B_P99 $B_ERR"

f() { echo "${ROW[$1]}" | awk -v i="$2" '{print $i}'; }
OUT="$ROOT/bench/results/h3-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# HTTP/3: weir vs Caddy"
  echo
  machine_info
  echo "- caddy: $(go version -m "$CADDY" 2>/dev/null | awk '$1 == "mod" {print $3}') (quic-go $(go version -m "$CADDY" 2>/dev/null | awk '$2 == "github.com/quic-go/quic-go" {print $3}')), GOMAXPROCS=1; weir: 1 worker; both pinned to core $SUT_CORE, load on core $LOAD_CORE"
  echo "- ECDSA P-256 certificate, TLS 1.3; ${SECS} s per run; CPU µs = the server's user+sys CPU time / requests (or handshakes)"
  echo
  echo "## HTTP/3, 100 connections x 10 streams, 1 KiB (weir bench --h3 -c 100 --streams 10)"
  echo
  echo "| server | response | requests/s | CPU µs/request | vs Caddy | p99 µs | errors |"
  echo "|---|---|---|---|---|---|---|"
  echo "| weir | cache hit | $(f weir.hit 1) | $(f weir.hit 2) | $(ratio "$(f weir.hit 2)" "$(f caddy.file 2)")× | $(f weir.hit 3) | $(f weir.hit 4) |"
  echo "| weir | static file | $(f weir.file 1) | $(f weir.file 2) | $(ratio "$(f weir.file 2)" "$(f caddy.file 2)")× | $(f weir.file 3) | $(f weir.file 4) |"
  echo "| Caddy | static file | $(f caddy.file 1) | $(f caddy.file 2) | 1.00× | $(f caddy.file 3) | $(f caddy.file 4) |"
  echo "| weir | respond (config) | $(f weir.respond 1) | $(f weir.respond 2) | $(ratio "$(f weir.respond 2)" "$(f caddy.respond 2)")× vs Caddy respond | $(f weir.respond 3) | $(f weir.respond 4) |"
  echo "| Caddy | respond (config) | $(f caddy.respond 1) | $(f caddy.respond 2) | | $(f caddy.respond 3) | $(f caddy.respond 4) |"
  echo
  echo "## HTTP/2 over TLS in the same run, 100 x 10, 1 KiB (h2load -c 100 -m 10)"
  echo
  echo "| server | response | requests/s | CPU µs/request | HTTP/3 ÷ HTTP/2 CPU | errors |"
  echo "|---|---|---|---|---|---|"
  echo "| weir | cache hit | $(f weir.h2 1) | $(f weir.h2 2) | $(ratio "$(f weir.hit 2)" "$(f weir.h2 2)")× | $(f weir.h2 4) |"
  echo "| weir (weir bench --h2 --streams 10, the HTTP/3 run's client design) | cache hit | $(f weir.h2b 1) | $(f weir.h2b 2) | $(ratio "$(f weir.hit 2)" "$(f weir.h2b 2)")× | $(f weir.h2b 4) |"
  echo "| Caddy | static file | $(f caddy.h2 1) | $(f caddy.h2 2) | $(ratio "$(f caddy.file 2)" "$(f caddy.h2 2)")× | $(f caddy.h2 4) |"
  echo
  echo "## A new QUIC connection per request (full handshake; weir bench --h3 --close -c 20)"
  echo
  echo "| server | handshakes/s | CPU µs/handshake | errors |"
  echo "|---|---|---|---|"
  echo "| weir | $(f weir.hs 1) | $(f weir.hs 2) | $(f weir.hs 3) |"
  echo "| Caddy | $(f caddy.hs 1) | $(f caddy.hs 2) | $(f caddy.hs 3) |"
  echo
  echo "## Idle HTTP/3 connections ($IDLE, each after one request; bench/tools/h3idle)"
  echo
  echo "| server | KiB per idle connection |"
  echo "|---|---|"
  echo "| weir | ${ROW[weir.idle]} |"
  echo "| Caddy | ${ROW[caddy.idle]} |"
  echo
  echo "## weir, 1 MiB file over HTTP/3, UDP GSO on and off (weir bench --h3 -c 10)"
  echo
  echo "| GSO | requests/s | CPU µs/request (1 MiB) | p99 µs | errors |"
  echo "|---|---|---|---|---|"
  echo "| on | $(f gso.on 1) | $(f gso.on 2) | $(f gso.on 3) | $(f gso.on 4) |"
  echo "| off | $(f gso.off 1) | $(f gso.off 2) | $(f gso.off 3) | $(f gso.off 4) |"
  echo
  echo "Command: \`bash bench/h3.sh $SECS $IDLE\`"
} > "$OUT"
cat "$OUT"
