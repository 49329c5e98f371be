#!/usr/bin/env bash
# TLS and HTTP/2 at the edge: weir next to Debian's nginx and HAProxy (OpenSSL), each with the
# same ECDSA P-256 certificate, TLS 1.3 only, caching a 1 KiB object from the same origin, one
# worker/thread pinned to core 0; the load generator on core 1. For each server:
#   1. HTTP/1.1 over TLS, keep-alive, 1 KiB cache hit: h2load --h1 (CPU µs/request, requests/s),
#      then weir bench for p99;
#   2. a new TLS connection per request (full handshake, no resumption), then with resumption:
#      weir bench --close (handshakes/s, server CPU µs per handshake);
#   3. HTTP/2, 100 connections x 10 streams, 1 KiB cache hit: h2load -m 10, then weir bench
#      --h2 for p99;
#   4. memory per idle TLS connection at IDLE connections (python ssl clients,
#      bench/tools/idle_conns.py).
# The plain-TCP floor (bench/tools/bare_epoll.c) and weir over plain TCP are measured in the same
# run, for how far TLS sits from a plain exchange.
# Usage: bench/tls.sh [SECONDS] [IDLE]   (results in bench/results/tls-<date>.md)
source "$(dirname "$0")/lib.sh"
SECS=${1:-8}
IDLE=${2:-10000}
ensure_pkgs nginx-light haproxy nghttp2-client python3 openssl gcc
build_weir
raise_nofile
# HAProxy wants 2 x maxconn descriptors and cannot go past the hard limit (20000 here, and not
# raisable in this container): it is given what fits, and its idle row uses that many.
HAP_MAXCONN=$(( ($(ulimit -n) - 200) / 2 ))
HAP_IDLE=$(( IDLE < HAP_MAXCONN - 100 ? IDLE : HAP_MAXCONN - 100 ))
cd "$TMP"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -keyout key.pem -out cert.pem -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
cat cert.pem key.pem > combined.pem

# The origin: a 1 KiB object, cacheable for an hour (nginx on the load core; hit once per server).
mkdir -p www && head -c 1024 /dev/zero | tr '\0' 'x' > www/s1024 && chmod -R a+rX "$TMP"
nginx_conf "$TMP/origin" <<NGX
  access_log off;
  default_type text/plain;
  server { listen 127.0.0.1:19400; root $TMP/www; expires 1h; }
NGX
start_nginx "$TMP/origin" "$LOAD_CORE"
wait_port 19400 "$TMP/origin/error.log"

cat > weir.yaml <<YAML
workers: 1
limits: { max_requests_per_connection: 0 }
cache_zones: { z: { max_size: 64m } }
upstreams: { o: { servers: ["127.0.0.1:19400"] } }
listeners:
  - address: 127.0.0.1:19401
    tls:
      certificates: [{ cert: $TMP/cert.pem, key: $TMP/key.pem }]
      protocols: [tls1.3]
    routes:
      - proxy: { upstream: o }
        cache: { zone: z }
  - address: 127.0.0.1:19404
    routes:
      - proxy: { upstream: o }
        cache: { zone: z }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c weir.yaml >/dev/null 2>weir.log &
WEIR_PID=$!; track $WEIR_PID
wait_port 19401 weir.log

nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  proxy_cache_path $TMP/nginx/cache keys_zone=z:16m max_size=64m;
  ssl_certificate $TMP/cert.pem;
  ssl_certificate_key $TMP/key.pem;
  ssl_protocols TLSv1.3;
  ssl_session_cache shared:SSL:10m;
  server { listen 127.0.0.1:19402 ssl http2 reuseport backlog=4096;
           location / { proxy_pass http://127.0.0.1:19400; proxy_cache z; proxy_cache_valid 200 1h; } }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"
NGINX_PID=$NGINX_STARTED
wait_port 19402 "$TMP/nginx/error.log"
NGINX_WORKER=$(pgrep -P "$NGINX_PID" | head -1)

haproxy_conf haproxy.cfg <<HAP
cache c
  total-max-size 64
  max-object-size 65536
  max-age 3600
frontend f
  bind 127.0.0.1:19403 ssl crt $TMP/combined.pem alpn h2,http/1.1 ssl-min-ver TLSv1.3
  default_backend b
backend b
  http-request cache-use c
  http-response cache-store c
  server o 127.0.0.1:19400
HAP
sed -i "s/maxconn 8000/maxconn $HAP_MAXCONN/" haproxy.cfg
taskset -c "$SUT_CORE" haproxy -f haproxy.cfg -db >haproxy.log 2>&1 &
HAPROXY_PID=$!; track $HAPROXY_PID
wait_port 19403 haproxy.log

# The plain keep-alive floor: a bare epoll server answering 1 KiB.
gcc -O2 -o bare_epoll "$BENCH_DIR/tools/bare_epoll.c"
taskset -c "$SUT_CORE" ./bare_epoll 19405 1024 >/dev/null 2>&1 &
BARE_PID=$!; track $BARE_PID
wait_port 19405

# Warm every cache (and check the object is a hit afterwards).
for p in 19401 19402 19403; do
  for i in 1 2 3; do curl -sk "https://localhost:$p/s1024" -o /dev/null --resolve "localhost:$p:127.0.0.1"; done
done
curl -s http://127.0.0.1:19404/s1024 -o /dev/null
curl -s http://127.0.0.1:19405/ -o /dev/null

# weir bench on the load core (JSON); sets B_RPS, B_P99 (µs), B_HS (handshakes/s), B_RESUMED,
# B_ERR and B_CPU (server CPU µs per request).
run_bench() { # pid url args...
  local pid=$1 url=$2; shift 2
  local t0 t1
  t0=$(cpu_ticks "$pid")
  taskset -c "$LOAD_CORE" "$WEIR" bench -t 1 -d "${SECS}s" --format json "$@" "$url" > bench.json 2>bench.err || true
  t1=$(cpu_ticks "$pid")
  read -r B_RPS B_P99 B_HS B_RESUMED B_ERR B_N < <(python3 -c '
import json, sys
r = json.load(open("bench.json"))[0]
e = sum(r["errors"].values())
print("%.0f %.0f %.0f %d %d %d" % (r["requests_per_second"], r["latency_ms"]["p99"] * 1000,
      r["handshakes_per_second"], r["tls_resumed"], e, r["requests"]))' 2>/dev/null || echo "n/a n/a n/a n/a n/a 0")
  B_CPU=$(awk -v d=$((t1 - t0)) -v r="${B_N:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", d * 1e6 / hz / r; else print "n/a" }')
}

declare -A PID_OF=([weir]=$WEIR_PID [nginx]=$NGINX_WORKER [haproxy]=$HAPROXY_PID)
declare -A PORT_OF=([weir]=19401 [nginx]=19402 [haproxy]=19403)
declare -A ROW
for sys in weir nginx haproxy; do
  pid=${PID_OF[$sys]} url="https://localhost:${PORT_OF[$sys]}/s1024"
  log "$sys: HTTP/1.1 over TLS, keep-alive"
  run_h2load "$pid" "$url" --h1 -c 50
  ROW[$sys.h1]="$RPS $CPU_US $FAILED"
  run_bench "$pid" "$url" -c 50
  ROW[$sys.h1b]="$B_RPS $B_P99 $B_ERR"
  log "$sys: a full handshake per request"
  run_bench "$pid" "$url" -c 20 --close
  ROW[$sys.full]="$B_HS $B_CPU $B_ERR $B_RESUMED"
  log "$sys: a resumed handshake per request"
  run_bench "$pid" "$url" -c 20 --close --tls-resume
  ROW[$sys.resumed]="$B_HS $B_CPU $B_ERR $B_RESUMED"
  log "$sys: h2, 100 connections x 10 streams"
  run_h2load "$pid" "$url" -c 100 -m 10
  ROW[$sys.h2]="$RPS $CPU_US $FAILED"
  run_bench "$pid" "$url" --h2 -c 100 -m 10
  ROW[$sys.h2b]="$B_RPS $B_P99 $B_ERR"
done
log "floor and plain weir (wrk-free: h2load --h1 over plain TCP)"
run_h2load "$BARE_PID" http://127.0.0.1:19405/ --h1 -c 50
ROW[floor]="$RPS $CPU_US $FAILED"
run_h2load "$WEIR_PID" http://127.0.0.1:19404/s1024 --h1 -c 50
ROW[plain]="$RPS $CPU_US $FAILED"

log "idle TLS connections ($IDLE each)"
declare -A IDLE_OF=([weir]=$IDLE [nginx]=$IDLE [haproxy]=$HAP_IDLE)
for sys in weir nginx haproxy; do
  n=${IDLE_OF[$sys]}
  read -r b a < <(idle_rss "${PID_OF[$sys]}" "${PORT_OF[$sys]}" /s1024 tls "$n")
  ROW[$sys.idle]=$(awk -v a="$b" -v b="$a" -v n="$n" 'BEGIN { printf "%.2f", (b - a) / n }')
done

f() { echo "${ROW[$1]}" | awk -v i="$2" '{print $i}'; }
OUT="$ROOT/bench/results/tls-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# TLS and HTTP/2: weir vs nginx vs HAProxy"
  echo
  machine_info
  echo "- haproxy: $(haproxy -v 2>&1 | head -1 | awk '{print $3}'), h2load: $(h2load --version 2>&1 | head -1 | awk '{print $2}'), $(openssl version)"
  echo "- all: ECDSA P-256 certificate, TLS 1.3 only, 1 worker/thread, 1 KiB object cached from an nginx origin"
  echo "- ${SECS} s per run; CPU µs = the server's user+sys CPU time / requests (or handshakes)"
  echo
  echo "## HTTP/1.1 over TLS, keep-alive, 1 KiB cache hit (h2load --h1 -c 50; p99 from weir bench -c 50)"
  echo
  echo "| server | requests/s | CPU µs/request | vs weir | p99 µs (weir bench) | errors |"
  echo "|---|---|---|---|---|---|"
  for sys in weir nginx haproxy; do
    echo "| $sys | $(f $sys.h1 1) | $(f $sys.h1 2) | $(ratio "$(f $sys.h1 2)" "$(f weir.h1 2)")× | $(f $sys.h1b 2) | $(f $sys.h1 3)/$(f $sys.h1b 3) |"
  done
  echo "| weir, plain TCP | $(f plain 1) | $(f plain 2) | $(ratio "$(f plain 2)" "$(f weir.h1 2)")× | | $(f plain 3) |"
  echo "| floor: bare_epoll, plain TCP | $(f floor 1) | $(f floor 2) | $(ratio "$(f floor 2)" "$(f weir.h1 2)")× | | $(f floor 3) |"
  echo
  echo "## A new TLS connection per request, 1 KiB (weir bench --close -c 20)"
  echo
  echo "| server | full handshakes/s | CPU µs/handshake | resumed handshakes/s | CPU µs/resumed | resumed share | errors |"
  echo "|---|---|---|---|---|---|---|"
  for sys in weir nginx haproxy; do
    hs=$(f $sys.full 1); rs=$(f $sys.resumed 1)
    echo "| $sys | $hs | $(f $sys.full 2) | $rs | $(f $sys.resumed 2) | $(f $sys.resumed 4) resumed | $(f $sys.full 3)/$(f $sys.resumed 3) |"
  done
  echo
  echo "## HTTP/2 over TLS, 100 connections x 10 streams, 1 KiB cache hit (h2load -c 100 -m 10; p99 from weir bench --h2)"
  echo
  echo "| server | requests/s | CPU µs/request | vs weir | p99 µs (weir bench) | errors |"
  echo "|---|---|---|---|---|---|"
  for sys in weir nginx haproxy; do
    echo "| $sys | $(f $sys.h2 1) | $(f $sys.h2 2) | $(ratio "$(f $sys.h2 2)" "$(f weir.h2 2)")× | $(f $sys.h2b 2) | $(f $sys.h2 3)/$(f $sys.h2b 3) |"
  done
  echo
  echo "## Idle TLS connections ($IDLE, each after one request)"
  echo
  echo "| server | idle connections | KiB per idle connection |"
  echo "|---|---|---|"
  for sys in weir nginx haproxy; do echo "| $sys | ${IDLE_OF[$sys]} | ${ROW[$sys.idle]} |"; done
  echo
  echo "HAProxy holds $HAP_IDLE: its maxconn is $HAP_MAXCONN, what the descriptor limit ($(ulimit -n), not raisable here) allows."
  echo
  echo "Command: \`bash bench/tls.sh $SECS $IDLE\`"
} > "$OUT"
cat "$OUT"
