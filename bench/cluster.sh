#!/usr/bin/env bash
# Three weir nodes on one machine with a real etcd (nodes on core 0; wrk, etcd and the nginx
# origin on core 1):
#  1. a peer-fill hit against a local hit: 4 KiB objects cached in a sharded zone, asked of node
#     a; a key a owns is a local hit, a key b owns is a hit fetched from b (one hop). CPU µs per
#     request of all three nodes together, requests/s and p99; floors in the same run:
#     bare_epoll answering 4 KiB (a local hit's), bare_relay in front of it (a peer fill's).
#  2. hit ratio and origin load with a working set of twice one node's zone (1 MiB zones, 4 KiB
#     objects, 512 keys asked at random through all three nodes), sharded against unsharded,
#     and sharded with hot copies (`local_hot: 256k`); then the same with a skewed working set
#     (key = 512 × u³: a few keys take most requests), where hot copies matter. Each row gives
#     the share of requests that took a peer fill (the hop hot copies remove).
#     A last uniform row keeps each zone in one memory shard: with 16 shards of 64 KiB, a shard
#     that draws more than its share of keys evicts while the zone has room.
# Usage: bench/cluster.sh [--quick]   (results in bench/results/cluster-<date>.md; SECTION=2
# runs only section 2)
source "$(dirname "$0")/lib.sh"
QUICK=${1:-}
DUR=${DUR:-8s}
[ "$QUICK" = --quick ] && DUR=4s
ensure_pkgs nginx-light wrk curl etcd-server etcd-client
build_weir
raise_nofile
gcc -O2 -o "$TMP/bare_epoll" "$BENCH_DIR/tools/bare_epoll.c"
gcc -O2 -o "$TMP/bare_relay" "$BENCH_DIR/tools/bare_relay.c"
ORIGIN=19401; ETCD=19402; ETCD_PEER=19403; P_BARE=19404; P_RELAY=19405
PORTS=(18401 18402 18403); ADMINS=(19411 19412 19413); NAMES=(a b c)
KEYS=512

# --- origin: every path is 4 KiB; its access log counts what reached it
chmod 755 "$TMP"; mkdir -p "$TMP/www"
head -c 4096 /dev/zero | tr '\0' 'x' > "$TMP/www/s4096"; chmod -R a+rX "$TMP/www"
nginx_conf "$TMP/origin" <<NGX
  access_log $TMP/origin/access.log;
  default_type text/plain;
  server { listen 127.0.0.1:$ORIGIN; root $TMP/www;
           location / { rewrite ^ /s4096 break; } }
NGX
start_nginx "$TMP/origin" "$LOAD_CORE"; wait_port $ORIGIN "$TMP/origin/error.log"
origin_count() { wc -l < "$TMP/origin/access.log"; }

# --- etcd
taskset -c "$LOAD_CORE" etcd --name=bench --data-dir="$TMP/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD" --advertise-client-urls="http://127.0.0.1:$ETCD" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER" \
  --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster="bench=http://127.0.0.1:$ETCD_PEER" >"$TMP/etcd.log" 2>&1 &
track $!; wait_port $ETCD "$TMP/etcd.log"

# --- nodes: start_nodes ZONE_SIZE sharded|unsharded
NODE_PIDS=()
start_nodes() {
  local zone=$1 mode=$2 i shard=""
  [ "$mode" = sharded ] && shard="    cluster: {}"
  [ "$mode" = sharded+hot ] && shard="    cluster: { local_hot: 256k }"
  # One memory shard: no shard's byte limit overflows before the zone's (16 by default).
  [ "$mode" = sharded,1-shard ] && shard="    shards: 1
    cluster: {}"
  NODE_PIDS=()
  for i in 0 1 2; do
    cat > "$TMP/${NAMES[$i]}.yaml" <<YAML
workers: 1
cluster:
  node: ${NAMES[$i]}
  etcd: ['127.0.0.1:$ETCD']
admin: { address: "127.0.0.1:${ADMINS[$i]}" }
cache_zones:
  z:
    max_size: $zone
$shard
upstreams: { o: { servers: ["127.0.0.1:$ORIGIN"], keepalive: { max_idle: 64 } } }
listeners:
  - address: 127.0.0.1:${PORTS[$i]}
    routes:
      - proxy: { upstream: o }
        cache: { zone: z, ttl: { "200": 1d }, ignore_origin: true }
YAML
    taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/${NAMES[$i]}.yaml" 2>>"$TMP/${NAMES[$i]}.log" &
    NODE_PIDS+=($!); track $!
  done
  for i in 0 1 2; do wait_port "${PORTS[$i]}" "$TMP/${NAMES[$i]}.log"; done
  for i in $(seq 1 100); do
    [ "$(curl -s "127.0.0.1:${ADMINS[0]}/cluster" | grep -o '"node":"[a-c]"' | wc -l)" -ge 4 ] && break
    sleep 0.1
  done
}
stop_nodes() {
  local p
  for p in "${NODE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${NODE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
nodes_ticks() { local t=0 p; for p in "${NODE_PIDS[@]}"; do t=$((t + $(cpu_ticks "$p"))); done; echo $t; }
peer_fills() { curl -s "127.0.0.1:${ADMINS[${1:-0}]}/cluster" | sed 's/.*"peer_fills":\([0-9]*\).*/\1/'; }
all_peer_fills() { echo $(( $(peer_fills 0) + $(peer_fills 1) + $(peer_fills 2) )); }
# run_nodes URL wrk-args...: run_wrk with the three nodes' CPU summed into CPU_US_PER_REQ.
run_nodes() {
  local url=$1; shift
  local t0 t1
  t0=$(nodes_ticks)
  run_wrk "${NODE_PIDS[0]}" "$url" "$@"
  t1=$(nodes_ticks)
  CPU_US_PER_REQ=$(awk -v d=$((t1 - t0)) -v r="${REQS:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", d * 1e6 / hz / r; else print "n/a" }')
}

OUT="$BENCH_DIR/results/cluster-$(date +%Y%m%d-%H%M).md"
{
  echo "# Cluster: peer fill and a sharded zone ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  machine_info
  echo "- command: \`bench/cluster.sh $QUICK\`; three weir nodes (1 worker each) on core $SUT_CORE, wrk, etcd and the nginx origin on core $LOAD_CORE"
  echo
} > "$OUT"

# --- 1. peer-fill hit against a local hit
if [ "${SECTION:-}" != 2 ]; then
log "1. peer fill against a local hit"
start_nodes 64m sharded
LOCAL=""; REMOTE=""
for k in $(seq 0 200); do
  before=$(peer_fills)
  curl -s -o /dev/null -H "Host: bench" "127.0.0.1:${PORTS[0]}/obj/$k"
  after=$(peer_fills)
  if [ "$after" = "$before" ]; then [ -z "$LOCAL" ] && LOCAL=$k; else [ -z "$REMOTE" ] && REMOTE=$k; fi
  [ -n "$LOCAL" ] && [ -n "$REMOTE" ] && break
done
for k in "$LOCAL" "$REMOTE"; do curl -s -o /dev/null -H "Host: bench" "127.0.0.1:${PORTS[0]}/obj/$k"; done
{
  echo "## 1. A peer-fill hit against a local hit (4 KiB, wrk -t1 -c16 -d$DUR, node a)"
  echo
  echo "CPU µs/req is the three nodes' user+sys together (a peer fill costs a and the owner)."
  echo
  echo "| request | requests/s | p99 µs | CPU µs/req | CPU vs local hit |"
  echo "|---|---|---|---|---|"
} >> "$OUT"
run_nodes "http://127.0.0.1:${PORTS[0]}/obj/$LOCAL" -t1 -c16 -d"$DUR" -H "Host: bench"
local_cpu=$CPU_US_PER_REQ
echo "| local hit (/obj/$LOCAL, owned by a) | $RPS | $P99_US | $CPU_US_PER_REQ | 1.00 |" >> "$OUT"
log "local hit: $RPS r/s, p99 $P99_US µs, $CPU_US_PER_REQ µs/req"
f0=$(peer_fills)
run_nodes "http://127.0.0.1:${PORTS[0]}/obj/$REMOTE" -t1 -c16 -d"$DUR" -H "Host: bench"
f1=$(peer_fills)
echo "| peer-fill hit (/obj/$REMOTE, owned by another node; $((f1 - f0)) peer fills) | $RPS | $P99_US | $CPU_US_PER_REQ | $(ratio "$CPU_US_PER_REQ" "$local_cpu") |" >> "$OUT"
log "peer fill: $RPS r/s, p99 $P99_US µs, $CPU_US_PER_REQ µs/req"
stop_nodes
taskset -c "$SUT_CORE" "$TMP/bare_epoll" $P_BARE 4096 & BARE=$!; track $BARE; wait_port $P_BARE
run_wrk $BARE "http://127.0.0.1:$P_BARE/" -t1 -c16 -d"$DUR"
bare_cpu=$CPU_US_PER_REQ
echo "| floor: bare_epoll (4 KiB) | $RPS | $P99_US | $CPU_US_PER_REQ | $(ratio "$CPU_US_PER_REQ" "$local_cpu") |" >> "$OUT"
taskset -c "$SUT_CORE" "$TMP/bare_relay" $P_RELAY $P_BARE & RELAY=$!; track $RELAY; wait_port $P_RELAY
t0=$(cpu_ticks $BARE)
run_wrk $RELAY "http://127.0.0.1:$P_RELAY/" -t1 -c16 -d"$DUR"
t1=$(cpu_ticks $BARE)
relay_cpu=$(awk -v c="$CPU_US_PER_REQ" -v d=$((t1 - t0)) -v r="${REQS:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", c + d * 1e6 / hz / r; else print "n/a" }')
echo "| floor: bare_relay → bare_epoll | $RPS | $P99_US | $relay_cpu | $(ratio "$relay_cpu" "$local_cpu") |" >> "$OUT"
kill $RELAY $BARE 2>/dev/null || true
log "floors: bare_epoll $bare_cpu, relay+epoll $relay_cpu µs/req"
fi

# --- 2. hit ratio and origin load, working set 2x one zone
log "2. working set of twice one zone, sharded and unsharded"
cat > "$TMP/uniform.lua" <<LUA
math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
request = function() return wrk.format(nil, "/obj/" .. math.random(0, $KEYS - 1), { Host = "bench" }) end
LUA
cat > "$TMP/skewed.lua" <<LUA
math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
request = function() return wrk.format(nil, "/obj/" .. math.floor($KEYS * math.random() ^ 3), { Host = "bench" }) end
LUA
{
  echo
  echo "## 2. Working set of twice one node's zone (1 MiB zones, 4 KiB objects, $KEYS keys at random through all three nodes, wrk -t1 -c8 -d$DUR per node at once, after one warm-up run)"
  echo
  echo "| keys | zone | requests | origin fetches | hit ratio | origin load r/s | requests/s (3 nodes) | CPU µs/req (3 nodes) | peer fills / requests |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >> "$OUT"
for keys in uniform skewed; do
modes="unsharded sharded sharded+hot"
[ "$keys" = uniform ] && modes="$modes sharded,1-shard"
for mode in $modes; do
  start_nodes 1m $mode
  if [ "$mode" = sharded ] && [ "$keys" = uniform ]; then
    SHARES=$(curl -s "127.0.0.1:${ADMINS[0]}/cluster" | python3 -c 'import json, sys; print(", ".join(f"{n} {100 * v:.1f}%" for n, v in sorted(json.load(sys.stdin)["sharded_zones"]["z"]["shares"].items())))')
  fi
  for pass in warm measure; do
    o0=$(origin_count); t0=$(nodes_ticks); p0=$(all_peer_fills)
    W=()
    for i in 0 1 2; do
      taskset -c "$LOAD_CORE" wrk -t1 -c8 -d"$DUR" -s "$TMP/$keys.lua" "http://127.0.0.1:${PORTS[$i]}/" > "$TMP/wrk-$i.out" 2>&1 &
      W+=($!)
    done
    wait "${W[@]}" || true
    sleep 0.2
    o1=$(origin_count); t1=$(nodes_ticks); p1=$(all_peer_fills)
  done
  reqs=$(cat "$TMP"/wrk-[012].out | awk '/requests in/ {s += $1} END {print s}')
  secs=$(awk -v d="$DUR" 'BEGIN { sub(/s$/, "", d); print d }')
  fetched=$((o1 - o0))
  line=$(awk -v r="$reqs" -v f="$fetched" -v s="$secs" -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v p=$((p1 - p0)) \
    'BEGIN { printf "%d | %d | %.1f%% | %.0f | %.0f | %.2f | %.1f%%", r, f, 100 * (1 - f / r), f / s, r / s, d * 1e6 / hz / r, 100 * p / r }')
  echo "| $keys | $mode | $line |" >> "$OUT"
  log "$keys $mode: $line"
  stop_nodes
done
done
echo >> "$OUT"
echo "- each node's share of the sharded zone's keys (GET /cluster): ${SHARES:-n/a}" >> "$OUT"
log "written $OUT"
cat "$OUT"
