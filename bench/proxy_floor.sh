#!/usr/bin/env bash
# Issue 10's proxy figure: how far weir's proxy path sits from what the kernel allows.
# examples/proxy.yaml with 1 worker on core 0, wrk -t1 -c100 on core 1, a 1 KiB file from an
# nginx origin (1 worker, core 1). In the same run: nginx and HAProxy as proxies (1 worker, core
# 0, keep-alive upstreams) and bench/tools/bare_relay.c (the floor: an epoll loop relaying
# bytes between each client and one upstream connection, no HTTP). Each cell is measured ROUNDS
# times in rotated order; medians of CPU µs/request (user+sys of the proxy ÷ requests).
# Then the breakdown: syscalls per request of weir, nginx, HAProxy and the floor (strace -c -f
# over a fixed `weir bench -n` run), and weir's user-space instructions per request (callgrind).
# A second table: a new client connection per proxied request (`Connection: close`, wrk -c200,
# seed experiment 002's pattern) for weir, nginx and HAProxy, upstream connections kept alive.
# Usage: bench/proxy_floor.sh [--quick]    (results in bench/results/proxy-floor-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=8s; ROUNDS=3
[ "${1:-}" = "--quick" ] && { DUR=4s; ROUNDS=1; }
ensure_pkgs nginx-light haproxy wrk strace valgrind gcc libc6-dev curl
build_weir
gcc -O2 -o "$TMP/bare_relay" "$BENCH_DIR/tools/bare_relay.c"
raise_nofile

ORIGIN=19401; P_WEIR=18480; P_NGINX=18481; P_HAPROXY=18482; P_FLOOR=18483
file_origin "$ORIGIN" 1024

WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$P_WEIR WEIR_ORIGIN=127.0.0.1:$ORIGIN \
  taskset -c "$SUT_CORE" "$WEIR" run -c "$ROOT/examples/proxy.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 1000000;
  upstream origin { server 127.0.0.1:$ORIGIN; keepalive 256; }
  server {
    listen 127.0.0.1:$P_NGINX reuseport backlog=4096;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED

haproxy_conf "$TMP/haproxy.cfg" <<HAP
frontend fe
  bind 127.0.0.1:$P_HAPROXY
  default_backend origin
backend origin
  server s1 127.0.0.1:$ORIGIN
HAP
taskset -c "$SUT_CORE" haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.log" &
HAPROXY_PID=$!; track $HAPROXY_PID

taskset -c "$SUT_CORE" "$TMP/bare_relay" $P_FLOOR $ORIGIN &
FLOOR_PID=$!; track $FLOOR_PID

wait_port $P_WEIR "$TMP/weir.log"; wait_port $P_NGINX "$TMP/nginx/error.log"
wait_port $P_HAPROXY "$TMP/haproxy.log"; wait_port $P_FLOOR
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)

SYSTEMS=("weir $WEIR_PID $P_WEIR" "nginx $NGINX_PID $P_NGINX" "haproxy $HAPROXY_PID $P_HAPROXY" "floor $FLOOR_PID $P_FLOOR")
declare -A CPU RPSV P99
for ((r = 0; r < ROUNDS; r++)); do
  while read -r s; do
    read -r name pid port <<<"$s"
    url="http://127.0.0.1:$port/s1024"
    taskset -c "$LOAD_CORE" wrk -t1 -c100 -d1s "$url" >/dev/null 2>&1 || true
    run_wrk "$pid" "$url" -t1 -c100 -d"$DUR"
    CPU[$name]+="$CPU_US_PER_REQ "; RPSV[$name]+="$RPS "; P99[$name]+="$P99_US "
    log "round $((r + 1)) $name: $RPS req/s, $CPU_US_PER_REQ CPU us/req, p99 ${P99_US}us, errors $ERRORS"
  done < <(rotated "$r" "${SYSTEMS[@]}")
done

# A new client connection per request (seed 002's pattern), the upstream ones kept alive.
declare -A CCPU CRPS CP99
for ((r = 0; r < ROUNDS; r++)); do
  while read -r s; do
    read -r name pid port <<<"$s"
    [ "$name" = floor ] && continue
    url="http://127.0.0.1:$port/s1024"
    run_wrk "$pid" "$url" -t1 -c200 -d"$DUR" -H "Connection: close"
    CCPU[$name]+="$CPU_US_PER_REQ "; CRPS[$name]+="$RPS "; CP99[$name]+="$P99_US "
    log "round $((r + 1)) $name, Connection: close: $RPS req/s, $CPU_US_PER_REQ CPU us/req, errors $ERRORS"
  done < <(rotated "$r" "${SYSTEMS[@]}")
done

# Syscalls per request, over a fixed number of keep-alive requests (-c 10).
N=20000
syscalls() { # pid port -> prints "calls-per-request syscall" lines, top 8
  local pid=$1 port=$2
  taskset -c "$LOAD_CORE" "$WEIR" bench -n 2000 -c 10 "http://127.0.0.1:$port/s1024" >/dev/null 2>&1
  strace -c -f -p "$pid" -o "$TMP/strace.out" &
  local st=$!; sleep 1
  taskset -c "$LOAD_CORE" "$WEIR" bench -n $N -c 10 "http://127.0.0.1:$port/s1024" >/dev/null 2>&1
  kill -INT $st; wait $st 2>/dev/null || true
  awk -v n=$N '$1 ~ /^[0-9.]+$/ && NF >= 5 { calls=$4; name=$NF; if (name != "total") printf "%.2f %s\n", calls / n, name }' "$TMP/strace.out" | sort -rn | head -8
}
WEIR_SYS=$(syscalls "$WEIR_PID" $P_WEIR)
NGINX_SYS=$(syscalls "$NGINX_PID" $P_NGINX)
HAPROXY_SYS=$(syscalls "$HAPROXY_PID" $P_HAPROXY)
FLOOR_SYS=$(syscalls "$FLOOR_PID" $P_FLOOR)

OUT="$ROOT/bench/results/proxy-floor-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# proxy path vs its floor: examples/proxy.yaml, 1 KiB from an nginx origin"
  echo
  machine_info
  echo "- haproxy: $(haproxy -v 2>&1 | head -1 | awk '{print $3}')"
  echo "- command: \`bench/proxy_floor.sh ${1:-}\`; wrk -t1 -c100 -d$DUR, median of $ROUNDS rounds (order rotated); origin: nginx, 1 worker, core 1 (with wrk)"
  echo
  echo "| proxy | requests/s | p99 µs | CPU µs/req | vs floor |"
  echo "|---|---:|---:|---:|---:|"
  fc=$(median ${CPU[floor]})
  for name in weir nginx haproxy floor; do
    c=$(median ${CPU[$name]})
    echo "| $name | $(median ${RPSV[$name]}) | $(median ${P99[$name]}) | $c | $(ratio "$c" "$fc") |"
  done
  echo
  echo 'A new client connection per request (`Connection: close`,'" wrk -t1 -c200 -d$DUR, median of $ROUNDS rounds):"
  echo
  echo "| proxy | requests/s | p99 µs | CPU µs/req | vs nginx |"
  echo "|---|---:|---:|---:|---:|"
  nc=$(median ${CCPU[nginx]})
  for name in weir nginx haproxy; do
    c=$(median ${CCPU[$name]})
    echo "| $name | $(median ${CRPS[$name]}) | $(median ${CP99[$name]}) | $c | $(ratio "$c" "$nc") |"
  done
  echo
  echo "Syscalls per request (strace -c over weir bench -n $N -c 10, keep-alive):"
  echo
  echo "| weir | nginx | haproxy | floor |"
  echo "|---|---|---|---|"
  paste -d'|' <(echo "$WEIR_SYS") <(echo "$NGINX_SYS") <(echo "$HAPROXY_SYS") <(echo "$FLOOR_SYS") |
    sed 's/|/ | /g; s/^/| /; s/$/ |/'
  echo
  echo "Every round: $(for name in weir nginx haproxy floor; do printf '%s CPU %s; ' "$name" "${CPU[$name]}"; done)"
} > "$OUT"
cat "$OUT"
log "results in $OUT"
