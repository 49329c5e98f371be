#!/usr/bin/env bash
# What logging and metrics cost per request, in the same run: hello (keep-alive, -c100) and a
# 1 KiB cache hit (-c100), each served by one build under three configs:
#   off     - `metrics: false`, no access log (the floor for this comparison)
#   metrics - the default: per-route counters and the duration histogram
#   access  - the default plus `access_log: { path: FILE, format: combined }`
# weir runs one worker on core 0, wrk -t1 on core 1; ROUNDS rounds with the order rotated, medians
# reported. Also user-space instructions per request under callgrind (fixed request count), and
# the user time per request apart. The peer: nginx `return 200` with `access_log off` and with a
# buffered combined log (`buffer=32k flush=1s`, the closest to weir's per-worker buffers), in the
# hello cells. For the user time: logging and counting are user-space work, and the kernel's
# share of a request (most of it, and the noisiest part on a shared machine) does not change
# with them, so "user µs added" over the off config's whole CPU µs/req is the steadiest estimate
# of what they cost.
# Usage: bench/ops_overhead.sh [--quick]
source "$(dirname "$0")/lib.sh"
DUR=5s; ROUNDS=${ROUNDS:-3}
[ "${1:-}" = --quick ] && { DUR=3s; ROUNDS=1; }
ensure_pkgs nginx-light wrk valgrind curl
build_weir
raise_nofile
ORIGIN_PORT=19301
file_origin "$ORIGIN_PORT" 1024

VARIANTS=(off metrics access)
variant_cfg() { # base variant -> path
  local base=$1 v=$2 out
  out="$TMP/$v-$(basename "$base")"
  cp "$ROOT/examples/$base" "$out"
  case $v in
    off) printf '\nmetrics: false\n' >> "$out" ;;
    access) printf '\naccess_log: { path: %s, format: combined }\n' "$TMP/access-$base.log" >> "$out" ;;
  esac
  echo "$out"
}

declare -A PID PORT
port=18480
for kind in hello cache; do
  for v in "${VARIANTS[@]}"; do
    cfg=$(variant_cfg "$kind.yaml" "$v")
    WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$port WEIR_ORIGIN=127.0.0.1:$ORIGIN_PORT WEIR_ADMIN=127.0.0.1:0 \
      taskset -c "$SUT_CORE" "$WEIR" run -c "$cfg" >/dev/null 2>"$TMP/weir-$kind-$v.log" &
    PID[$kind,$v]=$!; track $!; PORT[$kind,$v]=$port
    port=$((port + 1))
  done
done
# nginx, access log off and on (hello only).
for v in off access; do
  if [ "$v" = off ]; then log_line="access_log off;"; else
    log_line="access_log $TMP/nginx-access.log combined buffer=32k flush=1s;"; fi
  nginx_conf "$TMP/nginx-$v" <<NGX
  $log_line
  server { listen 127.0.0.1:$port; location / { return 200 "Hello, World\n"; } }
NGX
  start_nginx "$TMP/nginx-$v" "$SUT_CORE"
  PORT[nginx,$v]=$port; port=$((port + 1))
  wait_port "${PORT[nginx,$v]}" "$TMP/nginx-$v/error.log"
  PID[nginx,$v]=$(pgrep -P "$NGINX_STARTED" | head -1)
done
for k in "${!PORT[@]}"; do wait_port "${PORT[$k]}"; done
for v in "${VARIANTS[@]}"; do curl -s -o /dev/null "http://127.0.0.1:${PORT[cache,$v]}/s1024"; done

CELLS=("hello-ka-c100|hello|/hello" "hit-1KiB-c100|cache|/s1024" "nginx-hello-ka-c100|nginx|/hello")
declare -A CPU RPSV P99 IU USR
for ((r = 0; r < ROUNDS; r++)); do
  for cell in "${CELLS[@]}"; do
    IFS='|' read -r name kind path <<<"$cell"
    variants=("${VARIANTS[@]}"); [ "$kind" = nginx ] && variants=(off access)
    for v in $(rotated "$r" "${variants[@]}"); do
      url="http://127.0.0.1:${PORT[$kind,$v]}$path"
      taskset -c "$LOAD_CORE" wrk -t1 -c100 -d1s "$url" >/dev/null 2>&1 || true
      run_wrk "${PID[$kind,$v]}" "$url" -t1 -c100 -d"$DUR"
      CPU[$name,$v]+="$CPU_US_PER_REQ "; RPSV[$name,$v]+="$RPS "; P99[$name,$v]+="$P99_US "
      USR[$name,$v]+="$USER_US_PER_REQ "
      log "round $((r + 1)) $name $v: $RPS req/s, $CPU_US_PER_REQ CPU us/req ($USER_US_PER_REQ user), p99 ${P99_US}us"
    done
  done
done
LINES=$(cat "$TMP"/access-*.log "$TMP"/nginx-access.log 2>/dev/null | wc -l)

for cell in "${CELLS[@]}"; do
  IFS='|' read -r name kind path <<<"$cell"
  [ "$kind" = nginx ] && continue
  for v in "${VARIANTS[@]}"; do
    cg_instructions "$WEIR" "$(variant_cfg "$kind.yaml" "$v")" "$path" -c 10
    IU[$name,$v]=$INS
    log "callgrind $name $v: $INS instructions/request"
  done
done

OUT="$ROOT/bench/results/ops-overhead-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# Cost of metrics and the access log ($(git -C "$ROOT" rev-parse --short HEAD))"
  echo
  machine_info
  echo "- each cell: wrk -t1 -c100 -d$DUR, median of $ROUNDS rounds, order rotated; $LINES access log lines written"
  echo
  echo "| cell | config | CPU µs/req | vs off | user µs/req | user µs added | added / off's CPU | req/s | p99 µs | instructions/req | vs off |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for cell in "${CELLS[@]}"; do
    name=${cell%%|*}
    base=$(median ${CPU[$name,off]}); ubase=$(median ${USR[$name,off]})
    variants=("${VARIANTS[@]}"); [[ $name == nginx* ]] && variants=(off access)
    for v in "${variants[@]}"; do
      c=$(median ${CPU[$name,$v]}); u=$(median ${USR[$name,$v]})
      added=$(awk -v a="$u" -v b="$ubase" 'BEGIN { printf "%+.3f", a - b }')
      share=$(awk -v a="$u" -v b="$ubase" -v c="$base" 'BEGIN { if (c > 0) printf "%+.1f%%", 100 * (a - b) / c; else print "n/a" }')
      echo "| $name | $v | $c | $(ratio "$c" "$base") | $u | $added | $share | $(median ${RPSV[$name,$v]}) | $(median ${P99[$name,$v]}) | ${IU[$name,$v]:-—} | $(ratio "${IU[$name,$v]:-0}" "${IU[$name,off]:-0}") |"
    done
  done
  echo
  echo "Every round:"
  echo
  for cell in "${CELLS[@]}"; do
    name=${cell%%|*}
    variants=("${VARIANTS[@]}"); [[ $name == nginx* ]] && variants=(off access)
    for v in "${variants[@]}"; do echo "- $name $v: CPU ${CPU[$name,$v]}/ user ${USR[$name,$v]}"; done
  done
} > "$OUT"
cat "$OUT"
log "results in $OUT"
