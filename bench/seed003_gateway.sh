#!/usr/bin/env bash
# Seed 003 (Easegress vs NGINX vs Traefik as a gateway), reproduced here for issue 3:
# `/pipeline` proxied round-robin to a pool of two origins, by weir, nginx (proxy_pass with a
# keepalive upstream) and HAProxy (http-reuse always), each one worker pinned to core 0.
# The origin pool (one nginx worker answering 1 KiB on two ports) and the load generators share
# core 1. Runs hey -n 90000 at -c 100 and -c 120, without and with a ~1 KiB request body, then
# wrk -t1 -c100 -d10s; prints hey's table, wrk's figures, each proxy's CPU µs per request, and the
# upstream connections each proxy opened during the wrk run. A "floor" row in the wrk table is
# bench/tools/bare_relay.c: an epoll loop relaying bytes between each client and one upstream
# connection, with no HTTP at all: what the kernel alone costs per proxied exchange.
# Usage: bench/seed003_gateway.sh [--quick]   (results in bench/results/seed003-<date>.md)
source "$(dirname "$0")/lib.sh"

N=90000; WRK_D=10s
[ "${1:-}" = "--quick" ] && { N=20000; WRK_D=4s; }

ensure_pkgs nginx-light haproxy hey wrk gcc libc6-dev
build_weir
gcc -O2 -o "$TMP/bare_relay" "$BENCH_DIR/tools/bare_relay.c"
raise_nofile

O1=19001; O2=19002; OSTAT=19009
P_WEIR=18180; P_NGINX=18181; P_HAPROXY=18182; P_FLOOR=18183
BODY1K=$(head -c 1024 /dev/zero | tr '\0' 'x')
head -c 1000 /dev/zero | tr '\0' 'b' > "$TMP/body.txt"

# --- origin pool: one nginx worker on core 1 answering 1 KiB, accept counter on $OSTAT
nginx_conf "$TMP/origin" <<NGX
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$O1 reuseport backlog=4096;
    listen 127.0.0.1:$O2 reuseport backlog=4096;
    location / { default_type text/plain; return 200 "$BODY1K"; }
  }
  server { listen 127.0.0.1:$OSTAT; location / { stub_status; } }
NGX
start_nginx "$TMP/origin" "$LOAD_CORE"

# --- weir
cat > "$TMP/weir.yaml" <<YAML
workers: 1
upstreams:
  echo:
    servers: ["127.0.0.1:$O1", "127.0.0.1:$O2"]
    policy: round_robin
    keepalive: { max_idle: 1024 }
listeners:
  - address: 127.0.0.1:$P_WEIR
    routes:
      - match: { path_prefix: /pipeline }
        proxy: { upstream: echo }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

# --- nginx as proxy
nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 1000000;
  upstream echo { server 127.0.0.1:$O1; server 127.0.0.1:$O2; keepalive 1024; }
  server {
    listen 127.0.0.1:$P_NGINX reuseport backlog=4096;
    location /pipeline {
      proxy_pass http://echo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED

# --- HAProxy
haproxy_conf "$TMP/haproxy.cfg" <<HAP
frontend fe
  bind 127.0.0.1:$P_HAPROXY
  use_backend echo if { path_beg /pipeline }
backend echo
  balance roundrobin
  server s1 127.0.0.1:$O1
  server s2 127.0.0.1:$O2
HAP
taskset -c "$SUT_CORE" haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.log" &
HAPROXY_PID=$!; track $HAPROXY_PID

taskset -c "$SUT_CORE" "$TMP/bare_relay" $P_FLOOR $O1 &
FLOOR_PID=$!; track $FLOOR_PID

wait_port $O1 "$TMP/origin/error.log"; wait_port $P_WEIR "$TMP/weir.log"
wait_port $P_NGINX "$TMP/nginx/error.log"; wait_port $P_HAPROXY "$TMP/haproxy.log"
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)

SYSTEMS=("weir $WEIR_PID $P_WEIR" "nginx $NGINX_PID $P_NGINX" "haproxy $HAPROXY_PID $P_HAPROXY")
origin_accepts() { curl -s "http://127.0.0.1:$OSTAT/" | awk 'NR==3 {print $1}'; }

# hey run: prints one markdown row of hey's summary, plus CPU µs/req of the proxy.
hey_row() { # name pid port conns body?
  local name=$1 pid=$2 port=$3 c=$4 body=$5 args=() t0 t1 out
  [ "$body" = yes ] && args=(-m POST -D "$TMP/body.txt" -T text/plain)
  taskset -c "$LOAD_CORE" hey -n 2000 -c "$c" "${args[@]}" "http://127.0.0.1:$port/pipeline" >/dev/null 2>&1
  t0=$(cpu_ticks "$pid")
  out=$(taskset -c "$LOAD_CORE" hey -n "$N" -c "$c" "${args[@]}" "http://127.0.0.1:$port/pipeline")
  t1=$(cpu_ticks "$pid")
  echo "$out" > "$TMP/hey-$name-$c-$body.txt"
  # hey sends floor(n/c) requests per worker, so n*c/c may be fewer than -n.
  awk -v name="$name" -v c="$c" -v body="$body" -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$(( N / c * c ))" '
    /Total:/ {tot=$2} /Slowest:/ {slow=$2} /Fastest:/ {fast=$2} /Average:/ {avg=$2} /Requests\/sec:/ {rps=$2}
    /  90% in/ {p90=$3} /  95% in/ {p95=$3} /  99% in/ {p99=$3}
    /\[2[0-9][0-9]\]/ {ok+=$2}
    END { printf "| %s | %s | %s | %.4f | %.4f | %.4f | %.4f | %.0f | %.4f | %.4f | %.4f | %.2f | %d |\n",
          name, c, body, tot, slow, fast, avg, rps, p90, p95, p99, d*1e6/hz/n, n-ok }' <<<"$out"
}

OUT="$ROOT/bench/results/seed003-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# seed 003: gateway — weir vs nginx vs HAProxy proxying /pipeline to a round-robin pool"
  echo
  machine_info
  echo "- haproxy: $(haproxy -v 2>&1 | head -1 | awk '{print $3}'), hey: Debian $(dpkg-query -W -f='${Version}' hey)"
  echo "- command: \`bench/seed003_gateway.sh ${1:-}\`; origin pool: one nginx worker answering 1 KiB on two ports, on core 1 with the load generator"
  echo "- every proxy: 1 worker/thread on core 0, keep-alive upstream connections (nginx keepalive 1024, HAProxy http-reuse always, weir default pool)"
  echo
  echo "hey -n $N (times in seconds, as hey prints them; CPU = proxy user+sys per request; errors = non-2xx + failed)"
  echo
  echo "| proxy | conns | 1 KiB body | Total | Slowest | Fastest | Average | Requests/sec | 90% | 95% | 99% | CPU µs/req | errors |"
  echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} > "$OUT"
for c in 100 120; do
  for body in no yes; do
    for s in "${SYSTEMS[@]}"; do
      read -r name pid port <<<"$s"
      row=$(hey_row "$name" "$pid" "$port" "$c" "$body")
      log "$row"
      echo "$row" >> "$OUT"
    done
  done
done
{
  echo
  echo "wrk -t1 -c100 -d$WRK_D --latency, and upstream connections the origin accepted during that run"
  echo
  echo "| proxy | requests/s | p50 µs | p99 µs | CPU µs/req | upstream conns opened | errors |"
  echo "|---|---:|---:|---:|---:|---:|---|"
} >> "$OUT"
for s in "${SYSTEMS[@]}" "floor $FLOOR_PID $P_FLOOR"; do
  read -r name pid port <<<"$s"
  a0=$(origin_accepts)
  run_wrk "$pid" "http://127.0.0.1:$port/pipeline" -t1 -c100 -d"$WRK_D"
  a1=$(origin_accepts)
  row="| $name | $RPS | $P50_US | $P99_US | $CPU_US_PER_REQ | $((a1 - a0)) | $ERRORS |"
  log "$row"
  echo "$row" >> "$OUT"
done
cat "$OUT"
log "results written to ${OUT#$ROOT/}"
