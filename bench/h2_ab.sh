#!/usr/bin/env bash
# HTTP/2 over TLS, timed, two weir builds in one run: the setup of issue 35 §4 (a TLS 1.3
# listener serving a cached 1 KiB object; h2load -t 1 -D SECS -c 100 -m 10 on core 1; weir, one
# worker, on core 0). ROUNDS rounds with the order of the builds alternated; server CPU µs per
# request (user+sys from /proc/PID/stat) and requests/s, medians and the new/old ratio. A
# figure from another day is not comparable: this VM's speed moves by tens of percent between
# days, so the older build runs beside the new one.
# Usage: OLD_WEIR=/path/to/weir bench/h2_ab.sh [ROUNDS] [SECS]   (results in bench/results/h2-ab-<date>.md)
source "$(dirname "$0")/lib.sh"
ROUNDS=${1:-3}
SECS=${2:-6}
[ -n "${OLD_WEIR:-}" ] || { log "usage: OLD_WEIR=/path/to/weir bench/h2_ab.sh [ROUNDS] [SECS]"; exit 2; }
ensure_pkgs nginx-light nghttp2-client openssl curl
build_weir
NEW_WEIR=$WEIR
raise_nofile
ORIGIN_PORT=19321
file_origin "$ORIGIN_PORT" 1024
cd "$TMP"
export WEIR_ORIGIN=127.0.0.1:$ORIGIN_PORT
cache_tls_yaml cache-tls.yaml
declare -A PID PORT CPU RPSV
PORT[old]=18421; PORT[new]=18422
for which in old new; do
  if [ "$which" = old ]; then bin=$OLD_WEIR; else bin=$NEW_WEIR; fi
  WEIR_LISTEN=127.0.0.1:${PORT[$which]} taskset -c "$SUT_CORE" "$bin" run -c cache-tls.yaml \
    > "weir-$which.log" 2>&1 &
  PID[$which]=$!
  track ${PID[$which]}
done
for which in old new; do
  wait_port "${PORT[$which]}" "weir-$which.log"
  curl -sk -o /dev/null "https://127.0.0.1:${PORT[$which]}/s1024"
  curl -sk -o /dev/null "https://127.0.0.1:${PORT[$which]}/s1024"
  # A warm-up run (handshakes, the cache's first answers, allocator growth).
  taskset -c "$LOAD_CORE" h2load -t 1 -n 20000 -c 100 -m 10 "https://127.0.0.1:${PORT[$which]}/s1024" >/dev/null 2>&1 || true
done
# 43c50d3 spent seconds of CPU after the warm-up's connections closed (its first measured run
# cost 50-60 µs per request, the next ones 7-9): let that settle first.
sleep 5
for ((r = 0; r < ROUNDS; r++)); do
  order=(old new); [ $((r % 2)) = 1 ] && order=(new old)
  for which in "${order[@]}"; do
    run_h2load "${PID[$which]}" "https://127.0.0.1:${PORT[$which]}/s1024" -c 100 -m 10
    CPU[$which]+="$CPU_US "; RPSV[$which]+="$RPS "
    log "round $((r + 1)) $which: $RPS req/s, $CPU_US CPU µs/req (failed $FAILED)"
  done
done
OUT="$ROOT/bench/results/h2-ab-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# HTTP/2 over TLS A/B: $OLD_WEIR (old) vs $(git -C "$ROOT" rev-parse --short HEAD) (new)"
  echo
  machine_info
  echo "- h2load -t 1 -D $SECS -c 100 -m 10, a 1 KiB cache hit over TLS 1.3; $ROUNDS rounds, order alternated; \`OLD_WEIR=$OLD_WEIR bash bench/h2_ab.sh $ROUNDS $SECS\`"
  echo
  echo "| build | CPU µs/req per round | median | req/s median |"
  echo "|---|---|---:|---:|"
  for which in old new; do
    # shellcheck disable=SC2086
    echo "| $which | ${CPU[$which]}| $(median ${CPU[$which]}) | $(median ${RPSV[$which]}) |"
  done
  echo
  # shellcheck disable=SC2086
  echo "new/old CPU per request: $(ratio "$(median ${CPU[new]})" "$(median ${CPU[old]})")"
} > "$OUT"
cat "$OUT"
log "results in $OUT"
