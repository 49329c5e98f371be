#!/usr/bin/env bash
# Cache churn vs memory (issue 9, item 7): does the zone's `max_size` bound the process?
# weir runs examples/cache.yaml's rule (every 200 stored for a day whatever the origin says) with
# one worker on core 0 and a zone of MAX_SIZE; wrk -c50 on core 1 requests `/sN?k=<random>`, so
# every request is a miss that stores a new N-byte object and the store evicts all the time.
# After DUR of churn the table shows weir's RSS, its growth over the idle process, and that
# growth divided by max_size, then the same for the peak (VmHWM): responses being fetched are
# held while in flight and freed after, so the peak is what an OOM killer sees.
# Origin: nginx serving the files, on core 1 with wrk.
# Usage: bench/cache_churn.sh [--quick]   (env: DUR, SIZES, MAXES, CONNS override the matrix)
#   (results in bench/results/churn-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=${DUR:-30s}; SIZES=(${SIZES:-100 4096 1048576}); MAXES=(${MAXES:-8m 32m 128m}); CONNS=${CONNS:-50}
[ "${1:-}" = "--quick" ] && { DUR=10s; MAXES=(8m 32m); }
ensure_pkgs nginx-light wrk
build_weir
raise_nofile

ORIGIN_PORT=19201; P_WEIR=18290
file_origin "$ORIGIN_PORT" "${SIZES[@]}"

cat > "$TMP/churn.lua" <<'LUA'
math.randomseed(os.time())
request = function()
  return wrk.format("GET", wrk.path .. "?k=" .. math.random(1, 2000000000))
end
LUA

to_bytes() { numfmt --from=iec "$(echo "$1" | tr 'mkg' 'MKG')"; }

declare -A RSS IDLE GROWTH RATIO RPS_T PEAK PRATIO
for m in "${MAXES[@]}"; do
  for n in "${SIZES[@]}"; do
    # One shard per 4 MiB of zone, at least 1: a 1 MiB object must fit one shard.
    shards=$(( $(to_bytes "$m") / 4194304 )); [ "$shards" -lt 1 ] && shards=1
    cat > "$TMP/weir.yaml" <<YAML
workers: 1
cache_zones:
  main: { max_size: $m, shards: $shards }
upstreams:
  origin:
    servers: ["127.0.0.1:$ORIGIN_PORT"]
listeners:
  - address: 127.0.0.1:$P_WEIR
    routes:
      - proxy: { upstream: origin }
        cache: { zone: main, ttl: { "200": 1d }, ignore_origin: true, max_object_size: 2m }
YAML
    taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
    pid=$!; track "$pid"
    wait_port "$P_WEIR" "$TMP/weir.log"
    idle=$(rss_kib "$pid")
    run_wrk "$pid" "http://127.0.0.1:$P_WEIR/s$n" -t1 -c"$CONNS" -d"$DUR" -s "$TMP/churn.lua" </dev/null
    rss=$(rss_kib "$pid"); peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    PEAK[$m,$n]=$(( (peak - idle) / 1024 ))
    PRATIO[$m,$n]=$(awk -v g=$((peak - idle)) -v m="$(to_bytes "$m")" 'BEGIN { printf "%.2f", g * 1024 / m }')
    IDLE[$m,$n]=$idle; RSS[$m,$n]=$rss; RPS_T[$m,$n]=$RPS
    GROWTH[$m,$n]=$(( (rss - idle) / 1024 ))
    RATIO[$m,$n]=$(awk -v g=$((rss - idle)) -v m="$(to_bytes "$m")" 'BEGIN { printf "%.2f", g * 1024 / m }')
    log "max_size $m, ${n} B objects: RSS $((rss / 1024)) MiB (idle $((idle / 1024)) MiB), growth/max_size ${RATIO[$m,$n]}, $RPS req/s, errors $ERRORS"
  done
done

OUT="$ROOT/bench/results/churn-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# Cache churn: RSS against the zone's max_size"
  echo
  machine_info
  echo "- load: wrk -t1 -c$CONNS -d$DUR, every request a miss for a new key (/sN?k=<random>)"
  echo "- weir: 1 worker, ignore_origin + ttl 1d (examples/cache.yaml's rule), one shard per 4 MiB of zone"
  echo
  echo "| max_size | object | RSS after churn | idle RSS | growth | growth / max_size | peak growth | peak / max_size | requests/s |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for m in "${MAXES[@]}"; do
    for n in "${SIZES[@]}"; do
      echo "| $m | $n B | $(( RSS[$m,$n] / 1024 )) MiB | $(( IDLE[$m,$n] / 1024 )) MiB | ${GROWTH[$m,$n]} MiB | ${RATIO[$m,$n]} | ${PEAK[$m,$n]} MiB | ${PRATIO[$m,$n]} | ${RPS_T[$m,$n]} |"
    done
  done
} > "$OUT"
cat "$OUT"
log "results in $OUT"
