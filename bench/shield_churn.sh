#!/usr/bin/env bash
# The shield's client table under a churn of a million client addresses, each named by the PROXY
# v2 header of its own connection (bench/tools/flood.c `proxy` mode from 127.0.0.2-9, the
# balancers weir trusts): the table must stay within its bound (`shield.clients`), evicting the
# oldest idle clients, with every connection served. Prints the table's size, evictions, the
# connections served, the time taken and weir's RSS before and after.
# Usage: bench/shield_churn.sh [N]   (default 1000000; results in bench/results/shield-churn-<date>.md)
source "$(dirname "$0")/lib.sh"
N=${1:-1000000}
build_weir
raise_nofile
cc -O2 -o "$TMP/flood" "$BENCH_DIR/tools/flood.c"
PORT=18471; ADM=18472
cat > "$TMP/churn.yaml" <<YAML
workers: 1
shield:
  clients: 65536
  requests: { rate: 1000 }
listeners:
  - address: 127.0.0.1:$PORT
    proxy_protocol: { trusted: [127.0.0.0/8] }
    routes:
      - respond: { body: "ok\n" }
admin:
  address: 127.0.0.1:$ADM
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/churn.yaml" 2>"$TMP/weir.log" &
PID=$!; track $PID
wait_port $PORT "$TMP/weir.log"
rss0=$(rss_kib $PID)
start=$(date +%s.%N)
FLOOD_MAX=$N taskset -c "$LOAD_CORE" "$TMP/flood" proxy 127.0.0.1 $PORT 128 600 8 > "$TMP/flood.out"
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
rss1=$(rss_kib $PID)
m() { curl -s "http://127.0.0.1:$ADM/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
OUT="$ROOT/bench/results/shield-churn-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# The shield's client table under a churn of $N addresses (PROXY v2)"
  echo
  machine_info
  echo "- command: \`bench/shield_churn.sh $N\`"
  echo
  echo "| connections (flood.c) | clients remembered | bound | evicted | blocked | seconds | RSS before → after (MiB) |"
  echo "|---|---:|---:|---:|---:|---:|---|"
  echo "| $(cat "$TMP/flood.out") | $(m weir_shield_clients) | $(m weir_shield_max_clients) | $(m weir_shield_clients_evicted_total) | $(m weir_shield_blocked_clients) | $took | $((rss0 / 1024)) → $((rss1 / 1024)) |"
} > "$OUT"
log "results in $OUT"
cat "$OUT"
