#!/usr/bin/env bash
# Issue 55 §3's gRPC figure: a 1 KiB unary call (echo.Echo/Unary of tests/fixtures/grpc-go, a
# google.protobuf.StringValue of 1,024 bytes each way) through weir (h2c listener, `protocol:
# h2` upstream), nginx (`grpc_pass` with an upstream keepalive pool) and HAProxy (`proto h2` on
# both sides), and through bench/tools/bare_relay.c (the floor: bytes relayed, no HTTP/2), to
# the same grpc-go server, in the same run. Each proxy: 1 worker on core 0; the load (`weir
# bench --h2`, 10 connections x 10 streams) and the grpc-go server (GOMAXPROCS=1) on core 1.
# Each cell is measured ROUNDS times in rotated order; medians of the proxy's CPU µs per call
# (user+sys from /proc/PID/stat ÷ calls answered 200). The grpc-go server's CPU is the same for
# all and is not counted.
# Usage: bench/grpc.sh [--quick]    (results in bench/results/grpc-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=8s; ROUNDS=3
[ "${1:-}" = "--quick" ] && { DUR=4s; ROUNDS=1; }
ensure_pkgs nginx-light haproxy gcc libc6-dev
command -v go >/dev/null 2>&1 || export PATH="/usr/local/go/bin:$PATH"
build_weir
raise_nofile
gcc -O2 -o "$TMP/bare_relay" "$BENCH_DIR/tools/bare_relay.c"
(cd "$ROOT/crates/weir/tests/fixtures/grpc-go" && go build -o "$TMP/grpc-fixture" .)

P_WEIR=18680; P_NGINX=18681; P_HAPROXY=18682; P_FLOOR=18683
# The grpc-go server on the load core; its address from its first line.
mkfifo "$TMP/fixture.in"
(GOMAXPROCS=1 taskset -c "$LOAD_CORE" "$TMP/grpc-fixture" server -addr 127.0.0.1:19601 \
  <"$TMP/fixture.in" >"$TMP/fixture.out" 2>&1) &
track $!
exec 9>"$TMP/fixture.in"   # held open: the fixture exits when its stdin closes
ORIGIN=19601
wait_port $ORIGIN "$TMP/fixture.out"

python3 - "$TMP/call.bin" <<'PY'
import sys
msg = b"\x0a" + bytes([0x80, 0x08]) + b"x" * 1024   # StringValue{value: 1,024 bytes}
open(sys.argv[1], "wb").write(b"\x00" + len(msg).to_bytes(4, "big") + msg)
PY

cat > "$TMP/weir.yaml" <<YAML
workers: 1
upstreams:
  g: { servers: ["127.0.0.1:$ORIGIN"], protocol: h2 }
listeners:
  - address: 127.0.0.1:$P_WEIR
    h2c: true
    routes:
      - proxy: { upstream: g }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 1000000;
  http2_max_requests 1000000;
  upstream grpc_origin { server 127.0.0.1:$ORIGIN; keepalive 64; }
  server {
    listen 127.0.0.1:$P_NGINX http2 reuseport backlog=4096;
    location / { grpc_pass grpc://grpc_origin; }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED

haproxy_conf "$TMP/haproxy.cfg" <<HAP
frontend fe
  bind 127.0.0.1:$P_HAPROXY proto h2
  default_backend origin
backend origin
  server s1 127.0.0.1:$ORIGIN proto h2
HAP
taskset -c "$SUT_CORE" haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.log" &
HAPROXY_PID=$!; track $HAPROXY_PID

taskset -c "$SUT_CORE" "$TMP/bare_relay" $P_FLOOR $ORIGIN &
FLOOR_PID=$!; track $FLOOR_PID

wait_port $P_WEIR "$TMP/weir.log"; wait_port $P_NGINX "$TMP/nginx/error.log"
wait_port $P_HAPROXY "$TMP/haproxy.log"; wait_port $P_FLOOR
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)

# One run of calls against PORT for DURATION; sets CALLS, RPS, P99_US, BAD and CPU_US_PER_CALL
# (for server pid $1).
calls() {
  local pid=$1 port=$2 dur=$3 t0 t1
  t0=$(cpu_ticks "$pid")
  taskset -c "$LOAD_CORE" "$WEIR" bench --h2 -c 10 --streams 10 -m POST -D "$TMP/call.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' -d "$dur" --format json \
    "http://127.0.0.1:$port/echo.Echo/Unary" >"$TMP/bench.json" 2>"$TMP/bench.err" || true
  t1=$(cpu_ticks "$pid")
  read -r CALLS RPS P99_US BAD < <(python3 - "$TMP/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
ok = r["statuses"].get("200", 0)
bad = r["requests"] - ok + sum(r["errors"].values())
print(ok, round(r["requests_per_second"]), round(r["latency_ms"]["p99"] * 1000), bad)
PY
)
  CPU_US_PER_CALL=$(awk -v d=$((t1 - t0)) -v r="${CALLS:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", d * 1e6 / hz / r; else print "n/a" }')
}

SYSTEMS=("weir $WEIR_PID $P_WEIR" "nginx $NGINX_PID $P_NGINX" "haproxy $HAPROXY_PID $P_HAPROXY" "floor $FLOOR_PID $P_FLOOR")
declare -A CPU RPSV P99
for ((r = 0; r < ROUNDS; r++)); do
  while read -r s; do
    read -r name pid port <<<"$s"
    calls "$pid" "$port" 1s   # warm-up: connections and pools
    calls "$pid" "$port" "$DUR"
    CPU[$name]+="$CPU_US_PER_CALL "; RPSV[$name]+="$RPS "; P99[$name]+="$P99_US "
    log "round $((r + 1)) $name: $RPS calls/s, $CPU_US_PER_CALL CPU us/call, p99 ${P99_US}us, not 200: $BAD"
  done < <(rotated "$r" "${SYSTEMS[@]}")
done

OUT="$ROOT/bench/results/grpc-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# gRPC: a 1 KiB unary call through weir, nginx and HAProxy to grpc-go"
  echo
  machine_info
  echo "- haproxy: $(haproxy -v 2>&1 | head -1 | awk '{print $3}')"
  echo "- grpc-go: $(awk '/google.golang.org\/grpc v/ {print $2; exit}' "$ROOT/crates/weir/tests/fixtures/grpc-go/go.mod"), GOMAXPROCS=1, core 1 (with the load)"
  echo "- command: \`bench/grpc.sh ${1:-}\`; weir bench --h2 -c 10 --streams 10, POST of a 1,032-byte gRPC frame, -d $DUR, median of $ROUNDS rounds (order rotated)"
  echo
  echo "| proxy | calls/s | p99 µs | CPU µs/call | vs nginx | vs floor |"
  echo "|---|---:|---:|---:|---:|---:|"
  nc=$(median ${CPU[nginx]}); fc=$(median ${CPU[floor]})
  for name in weir nginx haproxy floor; do
    c=$(median ${CPU[$name]})
    echo "| $name | $(median ${RPSV[$name]}) | $(median ${P99[$name]}) | $c | $(ratio "$c" "$nc") | $(ratio "$c" "$fc") |"
  done
  echo
  echo "Every round: $(for name in weir nginx haproxy floor; do printf '%s CPU %s; ' "$name" "${CPU[$name]}"; done)"
} > "$OUT"
cat "$OUT"
log "results in $OUT"
