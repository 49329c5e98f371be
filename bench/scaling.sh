#!/usr/bin/env bash
# How weir scales with workers (issue 35 §5): for W = 1, 2, 4 … MAX_WORKERS pinned workers
# (weir on cores 0..W-1; the load generators and the nginx origin on the cores after them), each
# scenario runs SECS seconds and reports requests/s, requests/s per worker relative to one
# worker (the efficiency), the server's CPU µs per request, each worker's share of the
# connections and requests it got (SO_REUSEPORT's spread, from weir_worker_* in /metrics),
# p99 at 70% of the measured maximum (weir bench --rate, open loop) and, for the proxied row,
# upstream connection reuse (the origin's accepted connections per proxied request, from its
# stub_status).
# Scenarios: hello (keep-alive, 100 connections), a 1 KiB hit on one hot key, 1 KiB hits over
# 100k keys (wrk with a Lua script, after a warm-up pass that stores them), a proxied 1 KiB
# response (no cache), hello with Connection: close (200 connections), TLS 1.3 with session
# resumption and a new connection per request (weir bench --close --tls-resume), and HTTP/2
# over TLS (h2load -c 100 -m 10, 1 KiB hit).
# MAX_WORKERS defaults to the cores minus LOAD_CORES (default 1), at least 1. On this 2-core
# machine that is one worker; MAX_WORKERS=2 runs the two-worker row with the load sharing the
# cores (stated as oversubscribed in the result). On a large machine: LOAD_CORES=8 bench/scaling.sh.
# Usage: bench/scaling.sh [SECS]   (results in bench/results/scaling-<date>.md)
source "$(dirname "$0")/lib.sh"
SECS=${1:-5}
CORES=$(nproc)
LOAD_CORES=${LOAD_CORES:-1}
MAX_WORKERS=${MAX_WORKERS:-$(( CORES - LOAD_CORES > 0 ? CORES - LOAD_CORES : 1 ))}
ensure_pkgs nginx-light wrk python3 openssl nghttp2-client
build_weir
raise_nofile
cd "$TMP"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -keyout key.pem -out cert.pem -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
cat > keys.lua <<'LUA'
request = function() return wrk.format("GET", "/k/" .. math.random(0, 99999)) end
LUA

WORKER_LIST=()
for ((w = 1; w <= MAX_WORKERS; w *= 2)); do WORKER_LIST+=("$w"); done
[ "${WORKER_LIST[-1]}" = "$MAX_WORKERS" ] || WORKER_LIST+=("$MAX_WORKERS")

# Cores for W workers and for the load: weir on 0..W-1, the rest for the load (all cores when
# weir takes them all: oversubscribed).
cores_for() { # W -> SUT_CORES LOAD_SET LOAD_N OVER
  local w=$1
  SUT_CORES="0-$((w - 1))"
  if [ "$w" -lt "$CORES" ]; then LOAD_SET="$w-$((CORES - 1))"; LOAD_N=$((CORES - w)); OVER=no
  else LOAD_SET="0-$((CORES - 1))"; LOAD_N=$CORES; OVER=yes; fi
}

metric_sum() { # admin-port name -> sum of the samples, one per line "worker value"
  curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" 'index($1, n "_total{") == 1 {
    match($1, /worker="[0-9]+"/); w = substr($1, RSTART + 8, RLENGTH - 9); print w, $2 }'
}
# The spread of a per-worker counter between two snapshots: "max share% min share%".
spread() { # before-file after-file
  awk 'NR == FNR { b[$1] = $2; next } { d[$1] = $2 - b[$1]; t += d[$1] }
       END { mx = 0; mn = 100; for (w in d) { s = t > 0 ? 100 * d[w] / t : 0; if (s > mx) mx = s; if (s < mn) mn = s }
             printf "%.0f/%.0f", mx, mn }' "$1" "$2"
}

declare -A R
run_cell() { # W name url kind args...   kind: wrk | bench | h2load
  local w=$1 name=$2 url=$3 kind=$4; shift 4
  local t0 t1 reqs rps p99
  metric_sum 19590 weir_worker_connections_accepted > c0; metric_sum 19590 weir_worker_requests > r0
  t0=$(cpu_ticks "$WEIR_PID")
  case $kind in
    wrk)
      taskset -c "$LOAD_SET" wrk -t "$LOAD_N" -d "${SECS}s" --latency "$@" "$url" > out 2>&1 || true
      reqs=$(awk '/requests in/ {print $1}' out); rps=$(awk '/Requests\/sec/ {printf "%.0f", $2}' out)
      p99=$(awk '$1=="99%" {print $2}' out | to_us) ;;
    bench)
      taskset -c "$LOAD_SET" "$WEIR" bench -t "$LOAD_N" -d "${SECS}s" --format json "$@" "$url" > out 2>&1 || true
      read -r rps reqs p99 < <(python3 -c 'import json; r = json.load(open("out"))[0]
print("%.0f %d %.0f" % (r["requests_per_second"], r["requests"], r["latency_ms"]["p99"] * 1000))' 2>/dev/null || echo "n/a 0 n/a") ;;
    h2load)
      taskset -c "$LOAD_SET" h2load -t "$LOAD_N" -D "$SECS" "$@" "$url" > out 2>&1 || true
      rps=$(awk '/^finished in/ {gsub(",",""); printf "%.0f", $4}' out)
      reqs=$(awk '/^requests:/ {print $8}' out); p99=n/a ;;
  esac
  t1=$(cpu_ticks "$WEIR_PID")
  metric_sum 19590 weir_worker_connections_accepted > c1; metric_sum 19590 weir_worker_requests > r1
  R[$w,$name]="${rps:-n/a} $(awk -v d=$((t1 - t0)) -v r="${reqs:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", d * 1e6 / hz / r; else print "n/a" }') ${p99:-n/a} $(spread c0 c1) $(spread r0 r1)"
  log "W=$w $name: ${R[$w,$name]}"
}
# p99 at 70% of a measured rate, open loop (weir bench --rate).
p99_at_70() { # W name url max-rps args...
  local w=$1 name=$2 url=$3 max=$4; shift 4
  [ "$max" = n/a ] && { R[$w,$name.p70]=n/a; return; }
  taskset -c "$LOAD_SET" "$WEIR" bench -t "$LOAD_N" -d "${SECS}s" --rate "$(( max * 7 / 10 ))" --format json "$@" "$url" > out 2>&1 || true
  R[$w,$name.p70]=$(python3 -c 'import json; r = json.load(open("out"))[0]; print("%.0f" % (r["latency_ms"]["p99"] * 1000))' 2>/dev/null || echo n/a)
}

for w in "${WORKER_LIST[@]}"; do
  cores_for "$w"
  log "W=$w: weir on cores $SUT_CORES, load on $LOAD_SET${OVER/yes/ (oversubscribed)}"
  rm -rf origin; mkdir -p origin
  nginx_conf "$TMP/origin" <<NGX
  access_log off;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:19591 reuseport backlog=4096;
           location = /status { stub_status; }
           location / { default_type text/plain; add_header Cache-Control "max-age=3600";
                        return 200 "$(head -c 1024 /dev/zero | tr '\0' x)"; } }
NGX
  sed -i "s/worker_processes 1;/worker_processes $LOAD_N;/" origin/nginx.conf
  start_nginx "$TMP/origin" "$LOAD_SET"; ORIGIN_PID=$NGINX_STARTED
  wait_port 19591 origin/error.log
  cat > weir.yaml <<YAML
workers: $w
limits: { max_requests_per_connection: 0 }
admin: { address: 127.0.0.1:19590 }
cache_zones: { z: { max_size: 512m } }
upstreams:
  o: { servers: ["127.0.0.1:19591"], keepalive: { max_idle: 256, idle_timeout: 60s } }
listeners:
  - address: 127.0.0.1:19592
    routes:
      - { match: { path: /hello }, respond: { body: "Hello, World\n" } }
      - { match: { path_prefix: /p/ }, proxy: { upstream: o } }
      - { proxy: { upstream: o }, cache: { zone: z } }
  - address: 127.0.0.1:19593
    tls:
      certificates: [{ cert: $TMP/cert.pem, key: $TMP/key.pem }]
      protocols: [tls1.3]
    routes:
      - { match: { path: /hello }, respond: { body: "Hello, World\n" } }
      - { proxy: { upstream: o }, cache: { zone: z } }
YAML
  taskset -c "$SUT_CORES" "$WEIR" run -c weir.yaml >/dev/null 2>weir.log &
  WEIR_PID=$!; track $WEIR_PID
  wait_port 19592 weir.log; wait_port 19593 weir.log; wait_port 19590 weir.log
  H=http://127.0.0.1:19592
  curl -s "$H/s1024" -o /dev/null; curl -sk https://localhost:19593/s1024 --resolve localhost:19593:127.0.0.1 -o /dev/null
  run_cell "$w" hello "$H/hello" wrk -c 100
  max=$(echo "${R[$w,hello]}" | awk '{print $1}')
  p99_at_70 "$w" hello "$H/hello" "$max" -c 100
  run_cell "$w" hot "$H/s1024" wrk -c 100
  log "W=$w: storing 100k keys"
  taskset -c "$LOAD_SET" wrk -t "$LOAD_N" -c 100 -d "$((SECS * 2))s" -s keys.lua "$H" >/dev/null 2>&1 || true
  run_cell "$w" keys100k "$H" wrk -c 100 -s keys.lua
  a0=$(curl -s http://127.0.0.1:19591/status | awk 'NR == 3 {print $1}')
  run_cell "$w" proxy "$H/p/s1024" wrk -c 100
  a1=$(curl -s http://127.0.0.1:19591/status | awk 'NR == 3 {print $1}')
  reqs=$(awk '/requests in/ {print $1}' out)
  R[$w,reuse]=$(awk -v a=$((a1 - a0)) -v r="${reqs:-0}" 'BEGIN { if (r > 0) printf "%.4f", a / r; else print "n/a" }')
  max=$(echo "${R[$w,proxy]}" | awk '{print $1}')
  p99_at_70 "$w" proxy "$H/p/s1024" "$max" -c 100
  run_cell "$w" close "$H/hello" wrk -c 200 -H "Connection: close"
  run_cell "$w" tls-resume "https://localhost:19593/hello" bench -c 20 --close --tls-resume
  run_cell "$w" h2 "https://127.0.0.1:19593/s1024" h2load -c 100 -m 10
  R[$w,over]=$OVER; R[$w,cores]="$SUT_CORES / $LOAD_SET"
  kill "$WEIR_PID"; wait "$WEIR_PID" 2>/dev/null || true
  kill "$ORIGIN_PID"; wait "$ORIGIN_PID" 2>/dev/null || true
  sleep 1
done

OUT="$ROOT/bench/results/scaling-$(date -u +%Y%m%d-%H%M).md"
f() { echo "${R[$1]}" | awk -v i="$2" '{print $i}'; }
{
  echo "# weir scaling with workers (${SECS} s per cell)"
  echo
  machine_info
  echo "- $CORES cores; weir on cores 0..W-1, load (wrk / weir bench / h2load, -t = load cores) and the nginx origin on the rest"
  echo "- efficiency: requests/s per worker ÷ requests/s of one worker; share: the largest/smallest worker's % of the connections accepted and of the requests answered (an even spread is 100/W each)"
  echo
  echo "| W | cores (weir / load) | scenario | requests/s | efficiency | CPU µs/request | p99 µs | p99 µs at 70% | connections max/min % | requests max/min % |"
  echo "|---:|---|---|---:|---:|---:|---:|---:|---|---|"
  for w in "${WORKER_LIST[@]}"; do
    for s in hello hot keys100k proxy close tls-resume h2; do
      base=$(f "1,$s" 1); rps=$(f "$w,$s" 1)
      eff=$(awk -v r="$rps" -v b="$base" -v w="$w" 'BEGIN { if (b > 0 && r > 0) printf "%.2f", r / w / b; else print "n/a" }')
      p70=${R[$w,$s.p70]:-}
      cores="${R[$w,cores]}"; [ "${R[$w,over]}" = yes ] && cores="$cores (oversubscribed)"
      echo "| $w | $cores | $s | $rps | $eff | $(f "$w,$s" 2) | $(f "$w,$s" 3) | ${p70:--} | $(f "$w,$s" 4) | $(f "$w,$s" 5) |"
    done
  done
  echo
  echo "Upstream connection reuse (proxied row): origin connections accepted per proxied request:"
  for w in "${WORKER_LIST[@]}"; do echo "- W=$w: ${R[$w,reuse]}"; done
} > "$OUT"
cat "$OUT"
log "results in $OUT"
