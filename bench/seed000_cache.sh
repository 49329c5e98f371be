#!/usr/bin/env bash
# Seed 000 (nuster vs nginx vs Varnish, cache hits on one core), reproduced for issue 4:
# cache hits for 12 B … 1 KiB objects at -c 100 and -c 1000, weir vs HAProxy's cache vs nginx
# proxy_cache vs Varnish, each one worker on core 0, wrk -t1 on core 1, next to the kernel floor
# (a bare epoll loop with canned responses of the same size). Prints the seed's table
# (rows body size × conns, columns systems, cells requests/s), then CPU µs/request and p99.
# Usage: bench/seed000_cache.sh [--quick]   (results in bench/results/seed000-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=5s; SIZES=(12 64 128 256 512 1024); CONNS=(100 1000); ROUNDS=3
[ "${1:-}" = "--quick" ] && { DUR=2s; SIZES=(12 1024); ROUNDS=1; }
source "$BENCH_DIR/cache_common.sh"
warm_caches "${SIZES[@]}"
hits_before=$(origin_hits)

# The kernel's floor for the same exchange: bench/tools/bare_epoll.c answering every request with
# a canned response of the same size and fields (one read, one write, no HTTP, no cache), one
# process per body size. No cache can cost less per request than this on this machine.
ensure_pkgs gcc libc6-dev
gcc -O2 -o "$TMP/bare_epoll" "$BENCH_DIR/tools/bare_epoll.c"
declare -A FLOOR
P_FLOOR=18300
for n in "${SIZES[@]}"; do
  P_FLOOR=$((P_FLOOR + 1))
  taskset -c "$SUT_CORE" "$TMP/bare_epoll" "$P_FLOOR" "$n" &
  track $!; FLOOR[$n]="floor $! $P_FLOOR"
  wait_port "$P_FLOOR"
done

# Every cell is measured once per round; the tables show the median of the rounds.
declare -A RPS_R CPU_R P99_R RPS_T CPU_T P99_T
for ((r = 0; r < ROUNDS; r++)); do
  for n in "${SIZES[@]}"; do
    for c in "${CONNS[@]}"; do
      while read -r name pid port; do
        taskset -c "$LOAD_CORE" wrk -t1 -c"$c" -d1s "http://127.0.0.1:$port/s$n" >/dev/null 2>&1 </dev/null || true
        run_wrk "$pid" "http://127.0.0.1:$port/s$n" -t1 -c"$c" -d"$DUR" </dev/null
        RPS_R[$n,$c,$name]+="$RPS "; CPU_R[$n,$c,$name]+="$CPU_US_PER_REQ "; P99_R[$n,$c,$name]+="$P99_US "
        log "round $((r + 1))/$ROUNDS $n B -c$c $name: $RPS req/s, $CPU_US_PER_REQ CPU us/req, p99 ${P99_US}us, errors $ERRORS"
      done < <(rotated "$r" "${SYSTEMS[@]}" "${FLOOR[$n]}")
    done
  done
done
for k in "${!RPS_R[@]}"; do
  RPS_T[$k]=$(median ${RPS_R[$k]}); CPU_T[$k]=$(median ${CPU_R[$k]}); P99_T[$k]=$(median ${P99_R[$k]})
done
misses=$(( $(origin_hits) - hits_before ))

OUT="$ROOT/bench/results/seed000-$(date -u +%Y%m%d-%H%M).md"
table() { # title array unit
  local title=$1 arr=$2
  echo "$title"
  echo
  echo "| body | conns | weir | HAProxy cache | nginx proxy_cache | Varnish | floor |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for n in "${SIZES[@]}"; do
    for c in "${CONNS[@]}"; do
      eval "echo \"| $n B | $c | \${$arr[$n,$c,weir]} | \${$arr[$n,$c,haproxy]} | \${$arr[$n,$c,nginx]} | \${$arr[$n,$c,varnish]} | \${$arr[$n,$c,floor]} |\""
    done
  done
  echo
}
{
  echo "# seed 000: cache hits on one core — weir vs HAProxy cache vs nginx proxy_cache vs Varnish"
  echo
  machine_info
  echo "- haproxy $(haproxy -v 2>&1 | head -1 | awk '{print $3}'), varnish $(varnishd -V 2>&1 | head -1 | awk '{print $2}' | tr -d '(')"
  echo "- command: \`bench/seed000_cache.sh ${1:-}\`; wrk -t1 -d$DUR per cell after a 1 s warm-up; every object cached before measuring"
  echo "- every figure is the median of $ROUNDS rounds; each round runs every cell once, the systems' order rotated per round"
  echo "- rule in every system: cache 200 responses for one day whatever the origin says, add a response header"
  echo "- floor: bench/tools/bare_epoll.c answering with a canned response of the same size and fields (one read + one write per request, no HTTP): the kernel's own cost"
  echo "- origin requests during the measured runs (all should be hits): $misses"
  echo
  table "Requests/s" RPS_T
  table "CPU µs per request (cache process user+sys / requests)" CPU_T
  table "p99 latency µs" P99_T
  echo "Per-round CPU µs/request (round 1, 2, …), for the spread behind the medians:"
  echo
  echo "| body | conns | weir | HAProxy cache | nginx proxy_cache | Varnish | floor |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for n in "${SIZES[@]}"; do
    for c in "${CONNS[@]}"; do
      echo "| $n B | $c | ${CPU_R[$n,$c,weir]}| ${CPU_R[$n,$c,haproxy]}| ${CPU_R[$n,$c,nginx]}| ${CPU_R[$n,$c,varnish]}| ${CPU_R[$n,$c,floor]}|"
    done
  done
  echo
  echo "Ratios of the medians, weir's CPU µs/request to each peer's (lower is better):"
  echo
  echo "| body | conns | weir/HAProxy | weir/nginx | weir/Varnish | floor/nginx | weir/floor |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for n in "${SIZES[@]}"; do
    for c in "${CONNS[@]}"; do
      w=${CPU_T[$n,$c,weir]} f=${CPU_T[$n,$c,floor]}
      echo "| $n B | $c | $(ratio "$w" "${CPU_T[$n,$c,haproxy]}") | $(ratio "$w" "${CPU_T[$n,$c,nginx]}") | $(ratio "$w" "${CPU_T[$n,$c,varnish]}") | $(ratio "$f" "${CPU_T[$n,$c,nginx]}") | $(ratio "$w" "$f") |"
    done
  done
} > "$OUT"
cat "$OUT"
log "results written to ${OUT#$ROOT/}"
