#!/usr/bin/env bash
# TCP proxying (issue 36 §3): weir's `tcp:` listener against nginx `stream` and HAProxy `mode tcp`
# (with `option splice-auto`, its best), and bench/tools/bare_relay.c (the floor: an epoll loop
# with one upstream connection per client, every read written to the other side), each one
# worker on core 0, relaying to an nginx file origin on core 1 (with wrk).
# Two cells, each measured ROUNDS times in rotated order (medians):
# - per connection: wrk -c50 with `Connection: close` on a 1 KiB file, so every request is a new
#   client connection and a new upstream connection through the proxy: CPU µs per connection;
# - per GiB: wrk -c10 keep-alive on a 1 MiB file: the proxy's CPU ms per GiB relayed (1,024
#   responses), the bulk path (weir: splice).
# Usage: bench/tcp.sh [--quick]    (results in bench/results/tcp-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=6s; ROUNDS=3
[ "${1:-}" = "--quick" ] && { DUR=3s; ROUNDS=1; }
ensure_pkgs nginx-light libnginx-mod-stream haproxy wrk gcc libc6-dev
build_weir
gcc -O2 -o "$TMP/bare_relay" "$BENCH_DIR/tools/bare_relay.c"
raise_nofile

ORIGIN=19501; P_WEIR=18580; P_NGINX=18581; P_HAPROXY=18582; P_FLOOR=18583
file_origin "$ORIGIN" 1024 1048576

cat > "$TMP/weir.yaml" <<YAML
workers: 1
upstreams:
  origin: { servers: ["127.0.0.1:$ORIGIN"] }
listeners:
  - address: 127.0.0.1:$P_WEIR
    defer_accept: false
    tcp: { upstream: origin }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

mkdir -p "$TMP/stream"
cat > "$TMP/stream/nginx.conf" <<NGX
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
daemon off;
pid $TMP/stream/nginx.pid;
error_log $TMP/stream/error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 19000; }
stream {
  server { listen 127.0.0.1:$P_NGINX reuseport backlog=4096; proxy_pass 127.0.0.1:$ORIGIN; }
}
NGX
start_nginx "$TMP/stream" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED

cat > "$TMP/haproxy.cfg" <<HAP
global
  nbthread 1
  maxconn 4000
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option splice-auto
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

wait_port $P_WEIR "$TMP/weir.log"; wait_port $P_NGINX "$TMP/stream/error.log"
wait_port $P_HAPROXY "$TMP/haproxy.log"; wait_port $P_FLOOR
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)

SYSTEMS=("weir $WEIR_PID $P_WEIR" "nginx $NGINX_PID $P_NGINX" "haproxy $HAPROXY_PID $P_HAPROXY" "floor $FLOOR_PID $P_FLOOR")
declare -A CCPU CRPS CP99 BCPU BRPS BP99 ERR
for ((r = 0; r < ROUNDS; r++)); do
  while read -r s; do
    read -r name pid port <<<"$s"
    run_wrk "$pid" "http://127.0.0.1:$port/s1024" -t1 -c50 -d"$DUR" -H "Connection: close"
    CCPU[$name]+="$CPU_US_PER_REQ "; CRPS[$name]+="$RPS "; CP99[$name]+="$P99_US "
    ERR[$name]+="$ERRORS "
    log "round $((r + 1)) $name, per connection: $RPS conn/s, $CPU_US_PER_REQ CPU us/conn, errors $ERRORS"
    run_wrk "$pid" "http://127.0.0.1:$port/s1048576" -t1 -c10 -d"$DUR"
    # 1,024 responses of 1 MiB make a GiB: CPU ms per GiB.
    BCPU[$name]+="$(awk -v c="$CPU_US_PER_REQ" 'BEGIN { if (c == "n/a") print "n/a"; else printf "%.1f", c * 1024 / 1000 }') "
    BRPS[$name]+="$(awk -v r="$RPS" 'BEGIN { printf "%.2f", r / 1024 }') "; BP99[$name]+="$P99_US "
    log "round $((r + 1)) $name, bulk: $RPS MiB/s, $CPU_US_PER_REQ CPU us/MiB, errors $ERRORS"
  done < <(rotated "$r" "${SYSTEMS[@]}")
done

OUT="$ROOT/bench/results/tcp-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# TCP proxying: weir \`tcp:\` vs nginx \`stream\` vs HAProxy \`mode tcp\` (splice-auto), and the bare relay"
  echo
  machine_info
  echo "- haproxy: $(haproxy -v 2>&1 | head -1 | awk '{print $3}')"
  echo "- command: \`bench/tcp.sh ${1:-}\`; median of $ROUNDS rounds (order rotated), $DUR each; origin: nginx, 1 worker, core 1 (with wrk)"
  echo
  echo "A new connection per request (wrk -t1 -c50, \`Connection: close\`, 1 KiB): each is a client and an upstream connection."
  echo
  echo "| proxy | connections/s | p99 µs | CPU µs/connection | vs nginx | vs floor |"
  echo "|---|---:|---:|---:|---:|---:|"
  nc=$(median ${CCPU[nginx]}); fc=$(median ${CCPU[floor]})
  for name in weir nginx haproxy floor; do
    c=$(median ${CCPU[$name]})
    echo "| $name | $(median ${CRPS[$name]}) | $(median ${CP99[$name]}) | $c | $(ratio "$c" "$nc") | $(ratio "$c" "$fc") |"
  done
  echo
  echo "Bulk (wrk -t1 -c10 keep-alive, 1 MiB responses):"
  echo
  echo "| proxy | GiB/s | p99 µs | CPU ms/GiB | vs nginx | vs floor |"
  echo "|---|---:|---:|---:|---:|---:|"
  nb=$(median ${BCPU[nginx]}); fb=$(median ${BCPU[floor]})
  for name in weir nginx haproxy floor; do
    c=$(median ${BCPU[$name]})
    echo "| $name | $(median ${BRPS[$name]}) | $(median ${BP99[$name]}) | $c | $(ratio "$c" "$nb") | $(ratio "$c" "$fb") |"
  done
  echo
  echo "Errors per round (wrk socket errors, non-2xx): $(for name in weir nginx haproxy floor; do printf '%s: %s; ' "$name" "${ERR[$name]}"; done)"
} > "$OUT"
cat "$OUT"
log "results in $OUT"
