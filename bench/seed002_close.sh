#!/usr/bin/env bash
# Seed 002 (Tempesta FW vs nginx, a new connection per request), reproduced for issue 4:
# a cached 600-byte object fetched with `Connection: close` through weir, HAProxy's cache, nginx
# proxy_cache and Varnish, each one worker on core 0, wrk -t1 --latency on core 1. Prints
# requests/s, the latency distribution (50/75/90/99 %), socket errors and CPU µs per request.
# Usage: bench/seed002_close.sh [--quick]   (results in bench/results/seed002-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=10s; CONNS=(200 1000)
[ "${1:-}" = "--quick" ] && { DUR=3s; CONNS=(200); }
source "$BENCH_DIR/cache_common.sh"
warm_caches 600

OUT="$ROOT/bench/results/seed002-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# seed 002: Connection: close, cached 600-byte object — weir vs HAProxy vs nginx vs Varnish"
  echo
  machine_info
  echo "- command: \`bench/seed002_close.sh ${1:-}\`; wrk -t1 -d$DUR --latency -H 'Connection: close'"
  echo
  echo "| conns | system | requests/s | 50% | 75% | 90% | 99% | socket errors | CPU µs/req |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
} > "$OUT"
declare -A RPS_C
for c in "${CONNS[@]}"; do
  for s in "${SYSTEMS[@]}"; do
    read -r name pid port <<<"$s"
    taskset -c "$LOAD_CORE" wrk -t1 -c"$c" -d1s -H "Connection: close" "http://127.0.0.1:$port/s600" >/dev/null 2>&1 || true
    run_wrk "$pid" "http://127.0.0.1:$port/s600" -t1 -c"$c" -d"$DUR" -H "Connection: close"
    RPS_C[$c,$name]=$RPS
    dist=$(awk '$1=="50%"||$1=="75%"||$1=="90%"||$1=="99%" {printf "%s | ", $2}' "$TMP/wrk.out")
    row="| $c | $name | $RPS | $dist$ERRORS | $CPU_US_PER_REQ |"
    log "$row"
    echo "$row" >> "$OUT"
  done
done
{
  echo
  echo "| conns | weir/nginx requests/s | weir/HAProxy | weir/Varnish |"
  echo "|---:|---:|---:|---:|"
  for c in "${CONNS[@]}"; do
    echo "| $c | $(ratio "${RPS_C[$c,weir]}" "${RPS_C[$c,nginx]}") | $(ratio "${RPS_C[$c,weir]}" "${RPS_C[$c,haproxy]}") | $(ratio "${RPS_C[$c,weir]}" "${RPS_C[$c,varnish]}") |"
  done
} >> "$OUT"
cat "$OUT"
log "results written to ${OUT#$ROOT/}"
