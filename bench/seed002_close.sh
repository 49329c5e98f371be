#!/usr/bin/env bash
# Seed 002 (Tempesta FW vs nginx, a new connection per request), reproduced for issue 4:
# a cached 600-byte object fetched with `Connection: close` through weir, HAProxy's cache, nginx
# proxy_cache and Varnish, each one worker on core 0, wrk -t1 --latency on core 1. Prints
# requests/s, the latency distribution (50/75/90/99 %), socket errors and CPU µs per request.
# Usage: bench/seed002_close.sh [--quick]   (results in bench/results/seed002-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=10s; CONNS=(200 1000); ROUNDS=3
[ "${1:-}" = "--quick" ] && { DUR=3s; CONNS=(200); ROUNDS=1; }
source "$BENCH_DIR/cache_common.sh"
warm_caches 600

OUT="$ROOT/bench/results/seed002-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# seed 002: Connection: close, cached 600-byte object — weir vs HAProxy vs nginx vs Varnish"
  echo
  machine_info
  echo "- command: \`bench/seed002_close.sh ${1:-}\`; wrk -t1 -d$DUR --latency -H 'Connection: close'"
  echo "- every figure is the median of $ROUNDS rounds; each round runs every system once, the order rotated per round"
  echo
} > "$OUT"
declare -A RPS_R CPU_R ERR_R Q_R SB_R LB_R
for ((r = 0; r < ROUNDS; r++)); do
  for c in "${CONNS[@]}"; do
    while read -r name pid port; do
      taskset -c "$LOAD_CORE" wrk -t1 -c"$c" -d1s -H "Connection: close" "http://127.0.0.1:$port/s600" >/dev/null 2>&1 </dev/null || true
      run_wrk "$pid" "http://127.0.0.1:$port/s600" -t1 -c"$c" -d"$DUR" -H "Connection: close" </dev/null
      RPS_R[$c,$name]+="$RPS "; CPU_R[$c,$name]+="$CPU_US_PER_REQ "; ERR_R[$c,$name]+="$ERRORS "
      SB_R[$c,$name]+="$SUT_BUSY "; LB_R[$c,$name]+="$LOAD_BUSY "
      for q in 50 75 90 99; do
        Q_R[$c,$name,$q]+="$(awk -v q="$q%" '$1 == q {print $2}' "$TMP/wrk.out" | to_us) "
      done
      log "round $((r + 1))/$ROUNDS -c$c $name: $RPS req/s, $CPU_US_PER_REQ CPU us/req, errors $ERRORS, cores busy: server $SUT_BUSY%, load $LOAD_BUSY%"
    done < <(rotated "$r" "${SYSTEMS[@]}")
  done
done
declare -A RPS_C
{
  echo "Latency percentiles in µs. \"busy\": share of the core's time not idle during the run (user, system,"
  echo "irq and softirq from /proc/stat); on loopback the kernel work of both ends of a new connection"
  echo "mostly runs on the side that sends the packet, so a connection-per-request load generator"
  echo "saturates its core long before a fast server does."
  echo
  echo "| conns | system | requests/s | 50% | 75% | 90% | 99% | socket errors (per round) | CPU µs/req | server core busy | load core busy |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in "${CONNS[@]}"; do
    for s in "${SYSTEMS[@]}"; do
      read -r name _ _ <<<"$s"
      RPS_C[$c,$name]=$(median ${RPS_R[$c,$name]})
      echo "| $c | $name | ${RPS_C[$c,$name]} | $(median ${Q_R[$c,$name,50]}) | $(median ${Q_R[$c,$name,75]}) | $(median ${Q_R[$c,$name,90]}) | $(median ${Q_R[$c,$name,99]}) | ${ERR_R[$c,$name]}| $(median ${CPU_R[$c,$name]}) | $(median ${SB_R[$c,$name]})% | $(median ${LB_R[$c,$name]})% |"
    done
  done
  echo
  echo "Per-round requests/s (round 1, 2, …):"
  echo
  echo "| conns | weir | HAProxy | nginx | Varnish |"
  echo "|---:|---:|---:|---:|---:|"
  for c in "${CONNS[@]}"; do
    echo "| $c | ${RPS_R[$c,weir]}| ${RPS_R[$c,haproxy]}| ${RPS_R[$c,nginx]}| ${RPS_R[$c,varnish]}|"
  done
  echo
  echo "| conns | weir/nginx requests/s | weir/HAProxy | weir/Varnish |"
  echo "|---:|---:|---:|---:|"
  for c in "${CONNS[@]}"; do
    echo "| $c | $(ratio "${RPS_C[$c,weir]}" "${RPS_C[$c,nginx]}") | $(ratio "${RPS_C[$c,weir]}" "${RPS_C[$c,haproxy]}") | $(ratio "${RPS_C[$c,weir]}" "${RPS_C[$c,varnish]}") |"
  done
} >> "$OUT"
cat "$OUT"
log "results written to ${OUT#$ROOT/}"
