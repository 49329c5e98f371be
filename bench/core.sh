#!/usr/bin/env bash
# Issue 2 acceptance: weir (examples/hello.yaml, 1 worker) vs nginx (`return 200`, 1 worker), both
# pinned to core 0, wrk pinned to core 1, in the same run:
#   keep-alive -c 100 and -c 1000, Connection: close -c 200, and RSS with 10,000 idle keep-alive
#   connections. Prints requests/s, p50, p99 and the server's CPU µs per request
#   (user+sys ticks from /proc/PID/stat divided by requests).
# Two reference rows keep the comparison honest:
#   - "floor": bench/tools/bare_epoll.c, one epoll loop doing one read and one write per request
#     with no HTTP at all: what the kernel alone costs per keep-alive request on this machine;
#   - "nginx deferred": nginx with `listen ... deferred`, since weir defers accept by default.
# Usage: bench/core.sh [--quick]     (results land in bench/results/core-<date>.md)
source "$(dirname "$0")/lib.sh"

DUR=10s; WARM=2s; IDLE=10000
[ "${1:-}" = "--quick" ] && { DUR=4s; WARM=1s; IDLE=2000; }

ensure_pkgs nginx-light wrk python3 gcc libc6-dev
build_weir
gcc -O2 -o "$TMP/bare_epoll" "$BENCH_DIR/tools/bare_epoll.c"
raise_nofile

WEIR_PORT=18080; NGINX_PORT=18081; NGINX_DEF_PORT=18083; BARE_PORT=18082
WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$WEIR_PORT taskset -c "$SUT_CORE" \
  "$WEIR" run -c "$ROOT/examples/hello.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

nginx_conf "$TMP/nginx" <<NGX
  access_log off;            # weir has no access log either: compare like with like
  keepalive_requests 10000;  # weir's default max_requests_per_connection
  keepalive_timeout 60s;
  server {
    listen 127.0.0.1:$NGINX_PORT reuseport backlog=4096;
    listen 127.0.0.1:$NGINX_DEF_PORT reuseport backlog=4096 deferred;
    location = /hello { default_type text/plain; return 200 "Hello, World\n"; }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED
taskset -c "$SUT_CORE" "$TMP/bare_epoll" $BARE_PORT &
BARE_PID=$!; track $BARE_PID
wait_port $WEIR_PORT "$TMP/weir.log"; wait_port $NGINX_PORT "$TMP/nginx/error.log"; wait_port $BARE_PORT
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)

declare -A R
measure() { # name pid port label wrk-args...
  local name=$1 pid=$2 port=$3 label=$4; shift 4
  taskset -c "$LOAD_CORE" wrk -t1 -d"$WARM" "$@" "http://127.0.0.1:$port/hello" >/dev/null 2>&1 || true
  run_wrk "$pid" "http://127.0.0.1:$port/hello" -t1 -d"$DUR" "$@"
  R[$name,$label]="$RPS|$P50_US|$P99_US|$CPU_US_PER_REQ|$ERRORS"
  log "$name $label: $RPS req/s, p50 ${P50_US}us, p99 ${P99_US}us, ${CPU_US_PER_REQ} CPU us/req, errors $ERRORS"
}

SCEN=("keep-alive -c 100" "keep-alive -c 1000" "close -c 200")
set_args() {
  case "$1" in
    "keep-alive -c 100") ARGS=(-c100) ;;
    "keep-alive -c 1000") ARGS=(-c1000) ;;
    "close -c 200") ARGS=(-c200 -H "Connection: close") ;;
  esac
}
# Which servers each scenario compares: name, pid, port. The floor cannot do Connection: close
# (it never closes), and nginx deferred only changes the close path.
servers_for() {
  case "$1" in
    close*) SERVERS=("weir $WEIR_PID $WEIR_PORT" "nginx $NGINX_PID $NGINX_PORT" "nginx-deferred $NGINX_PID $NGINX_DEF_PORT") ;;
    *) SERVERS=("weir $WEIR_PID $WEIR_PORT" "nginx $NGINX_PID $NGINX_PORT" "floor $BARE_PID $BARE_PORT") ;;
  esac
}
for s in "${SCEN[@]}"; do
  set_args "$s"
  servers_for "$s"
  for srv in "${SERVERS[@]}"; do
    read -r name pid port <<<"$srv"
    measure "$name" "$pid" "$port" "$s" "${ARGS[@]}"
  done
done

read -r WB WA < <(idle_rss $WEIR_PID $WEIR_PORT)
read -r NB NA < <(idle_rss $NGINX_PID $NGINX_PORT)
per_conn() { awk -v a="$1" -v b="$2" -v n="$IDLE" 'BEGIN { printf "%.2f", (b - a) / n }'; }

OUT="$ROOT/bench/results/core-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# core: weir vs nginx, plain hello (issue 2 / seeds 001, 004)"
  echo
  machine_info
  echo "- command: \`bench/core.sh ${1:-}\` (wrk -t1 -d$DUR --latency, warm-up $WARM per run)"
  echo
  echo "| scenario | server | requests/s | p50 µs | p99 µs | CPU µs/req | errors |"
  echo "|---|---|---:|---:|---:|---:|---|"
  for s in "${SCEN[@]}"; do
    servers_for "$s"
    for srv in "${SERVERS[@]}"; do
      read -r n _ _ <<<"$srv"
      IFS='|' read -r rps p50 p99 cpu err <<<"${R[$n,$s]}"
      echo "| $s | $n | $rps | $p50 | $p99 | $cpu | $err |"
    done
  done
  echo
  echo "Ratios to nginx with its defaults (and, last column, the reference row of the scenario):"
  echo
  echo "| scenario | weir/nginx CPU µs/req | weir/nginx requests/s | weir/nginx p99 | reference/nginx CPU µs/req |"
  echo "|---|---:|---:|---:|---:|"
  for s in "${SCEN[@]}"; do
    servers_for "$s"
    read -r refname _ _ <<<"${SERVERS[2]}"
    IFS='|' read -r wr _ wp wc _ <<<"${R[weir,$s]}"
    IFS='|' read -r nr _ np nc _ <<<"${R[nginx,$s]}"
    IFS='|' read -r _ _ _ rc _ <<<"${R[$refname,$s]}"
    echo "| $s | $(ratio "$wc" "$nc") | $(ratio "$wr" "$nr") | $(ratio "$wp" "$np") | $refname: $(ratio "$rc" "$nc") |"
  done
  echo
  echo "Idle keep-alive connections: $IDLE, each after one request (RSS of the serving process)."
  echo
  echo "| server | RSS before KiB | RSS with $IDLE idle KiB | KiB per connection |"
  echo "|---|---:|---:|---:|"
  echo "| weir | $WB | $WA | $(per_conn "$WB" "$WA") |"
  echo "| nginx (worker) | $NB | $NA | $(per_conn "$NB" "$NA") |"
} | tee "$OUT"
log "results written to ${OUT#$ROOT/}"
