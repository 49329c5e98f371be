#!/usr/bin/env bash
# The disk tier and the key-value store, pinned (server on core 0, load and origin on core 1):
#  1. disk-tier hits of 1 KiB, 64 KiB and 1 MiB objects (page cache warm) against nginx
#     proxy_cache on disk: weir's memory tier is 64 KiB, so random requests over the working set
#     are answered from disk (read on the IO pool, checksummed, promoted, evicted again); the
#     floor is bare_epoll answering the same size. Then the 1 MiB run again with the page cache
#     dropped (cold), and the p99 of a memory hit while 1 MiB disk reads run beside it.
#  2. restart: N objects on disk (100k and 1M), weir stopped and started again: time until the
#     first hit, the index load time, and RSS (bytes of index per object).
#  3. the key-value store: GET and PUT of 100 B and 4 KiB values, beside a memory cache hit of the
#     same size from weir and redis-benchmark GET/SET for scale.
# Usage: bench/disk.sh [--quick]   (results in bench/results/disk-<date>.md; HITS_ONLY=1 stops
# after section 1's warm hits)
source "$(dirname "$0")/lib.sh"
QUICK=${1:-}
DUR=${DUR:-8s}
[ "$QUICK" = --quick ] && DUR=4s
ensure_pkgs nginx-light wrk curl redis-server redis-tools
build_weir
raise_nofile
gcc -O2 -o "$TMP/bare_epoll" "$BENCH_DIR/tools/bare_epoll.c"
ORIGIN=19301; P_WEIR=18301; P_NGINX=18302; P_BARE=18303; ADM=19302; P_REDIS=18304

# --- origin: any /SIZE/NAME (or /m/SIZE/NAME) is the file of SIZE bytes
chmod 755 "$TMP"; mkdir -p "$TMP/www"
for n in 100 1024 4096 65536 1048576; do head -c "$n" /dev/zero | tr '\0' 'x' > "$TMP/www/s$n"; done
chmod -R a+rX "$TMP/www"
nginx_conf "$TMP/origin" <<NGX
  access_log $TMP/origin/access.log;
  default_type text/plain;
  server { listen 127.0.0.1:$ORIGIN; root $TMP/www;
           location / { rewrite ^/(?:m/)?(\d+)/ /s\$1 break; } }
NGX
start_nginx "$TMP/origin" "$LOAD_CORE"; wait_port $ORIGIN "$TMP/origin/error.log"

# --- weir: 64 KiB of memory in front of a 2 GiB disk tier, and a kv store
mkdir -p "$TMP/weir-disk" "$TMP/weir-kv"
cat > "$TMP/weir.yaml" <<YAML
workers: 1
cache_zones:
  small: { max_size: 64k, shards: 1, disk: { path: "$TMP/weir-disk", max_size: 2g } }
  mem: { max_size: 64m }
kv_stores:
  kv: { max_size: 256m, disk: { path: "$TMP/weir-kv" } }
admin: { address: "127.0.0.1:$ADM" }
upstreams: { o: { servers: ["127.0.0.1:$ORIGIN"], keepalive: { max_idle: 64 } } }
listeners:
  - address: 127.0.0.1:$P_WEIR
    routes:
      - match: { path_prefix: /kv/ }
        kv: { store: kv }
      - match: { path_prefix: /m/ }
        proxy: { upstream: o }
        cache: { zone: mem, ttl: { "200": 1d }, ignore_origin: true }
      - proxy: { upstream: o }
        cache: { zone: small, ttl: { "200": 1d }, ignore_origin: true, max_object_size: 2m }
YAML
start_weir() {
  taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>>"$TMP/weir.log" &
  WEIR_PID=$!; track $WEIR_PID
}
start_weir; wait_port $P_WEIR "$TMP/weir.log"

# --- nginx proxy_cache on disk (its usual setup: sendfile, a keys zone, levels)
mkdir -p "$TMP/nginx/cache"; chmod 777 "$TMP/nginx/cache"
nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  proxy_cache_path $TMP/nginx/cache levels=1:2 keys_zone=c:64m max_size=2g inactive=1d;
  upstream origin { server 127.0.0.1:$ORIGIN; keepalive 64; }
  server {
    listen 127.0.0.1:$P_NGINX reuseport backlog=4096;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache c;
      proxy_cache_valid 200 1d;
      proxy_ignore_headers Cache-Control Expires Set-Cookie;
      proxy_max_temp_file_size 0;
    }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED
wait_port $P_NGINX "$TMP/nginx/error.log"
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)

# wrk script: random objects /SIZE/0..N-1
random_lua() {
  cat > "$TMP/random-$1.lua" <<LUA
request = function() return wrk.format(nil, "/$1/" .. math.random(0, $2 - 1)) end
LUA
}
# Requests every object of the working set, in turn, for 3 s (each one many times).
warm() { # port size count
  cat > "$TMP/seq.lua" <<LUA
local i = -1
request = function() i = (i + 1) % $3; return wrk.format(nil, "/$2/" .. i) end
LUA
  taskset -c "$LOAD_CORE" wrk -t1 -c4 -d3s -s "$TMP/seq.lua" "http://127.0.0.1:$1/" >/dev/null 2>&1 || true
}
origin_hits() { wc -l < "$TMP/origin/access.log"; }
metric() { curl -s "http://127.0.0.1:$ADM/metrics" | awk -v n="$1" '$1 == n {print $2}'; }

OUT="$ROOT/bench/results/disk-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# Disk tier and key-value store"
  echo
  machine_info
  echo "- command: \`bench/disk.sh $QUICK\`, wrk -t1 -c16 -d$DUR per cell, random objects over the working set"
  echo "- weir: 64 KiB memory tier (so hits come from disk), 2 GiB disk tier; nginx: proxy_cache on disk, sendfile on"
  echo
  echo "## Disk-tier hits (page cache warm)"
  echo
  echo "| object | objects | system | req/s | p99 µs | CPU µs/hit | vs nginx | disk hits / reqs |"
  echo "|---|---:|---|---:|---:|---:|---:|---|"
} > "$OUT"

for cell in "1024 2000" "65536 400" "1048576 100"; do
  read -r size count <<<"$cell"
  random_lua "$size" "$count"
  warm $P_WEIR "$size" "$count"; warm $P_NGINX "$size" "$count"
  sleep 1
  before=$(origin_hits)
  warm $P_WEIR "$size" "$count"; warm $P_NGINX "$size" "$count"
  [ "$(origin_hits)" = "$before" ] || log "warning: $(( $(origin_hits) - before )) warm requests reached the origin"
  d0=$(metric 'weir_cache_disk_hits_total{zone="small"}')
  run_wrk $WEIR_PID "http://127.0.0.1:$P_WEIR/" -t1 -c16 -d"$DUR" -s "$TMP/random-$size.lua"
  d1=$(metric 'weir_cache_disk_hits_total{zone="small"}')
  w_cpu=$CPU_US_PER_REQ; w_line="$RPS | $P99_US | $CPU_US_PER_REQ"; w_reqs=$REQS
  run_wrk $NGINX_PID "http://127.0.0.1:$P_NGINX/" -t1 -c16 -d"$DUR" -s "$TMP/random-$size.lua"
  n_cpu=$CPU_US_PER_REQ; n_line="$RPS | $P99_US | $CPU_US_PER_REQ"
  taskset -c "$SUT_CORE" "$TMP/bare_epoll" $P_BARE "$size" & BARE=$!; track $BARE; wait_port $P_BARE
  run_wrk $BARE "http://127.0.0.1:$P_BARE/" -t1 -c16 -d"$DUR"
  kill $BARE 2>/dev/null || true
  {
    echo "| $size B | $count | weir | $w_line | $(ratio "$w_cpu" "$n_cpu") | $((d1 - d0)) / $w_reqs |"
    echo "| $size B | $count | nginx | $n_line | 1.00 | |"
    echo "| $size B | | floor (bare_epoll) | $RPS | $P99_US | $CPU_US_PER_REQ | $(ratio "$CPU_US_PER_REQ" "$n_cpu") | |"
  } >> "$OUT"
  log "$size: weir $w_cpu µs/hit, nginx $n_cpu"
done

# HITS_ONLY=1: stop after the warm hits (a quick look at the hot path).
if [ -n "${HITS_ONLY:-}" ]; then log "results: $OUT"; exit 0; fi

# Cold page cache (1 MiB objects), then memory-hit p99 beside disk reads.
{
  echo
  echo "## Cold page cache (1 MiB objects, caches dropped before each run) and a worker beside slow reads"
  echo
  echo "| run | system | req/s | p99 µs | CPU µs/req |"
  echo "|---|---|---:|---:|---:|"
} >> "$OUT"
if sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
  run_wrk $WEIR_PID "http://127.0.0.1:$P_WEIR/" -t1 -c16 -d"$DUR" -s "$TMP/random-1048576.lua"
  echo "| cold 1 MiB | weir | $RPS | $P99_US | $CPU_US_PER_REQ |" >> "$OUT"
  sync; echo 3 > /proc/sys/vm/drop_caches
  run_wrk $NGINX_PID "http://127.0.0.1:$P_NGINX/" -t1 -c16 -d"$DUR" -s "$TMP/random-1048576.lua"
  echo "| cold 1 MiB | nginx | $RPS | $P99_US | $CPU_US_PER_REQ |" >> "$OUT"
else
  echo "| cold | (cannot drop caches here) | | | |" >> "$OUT"
fi
curl -s -o /dev/null "http://127.0.0.1:$P_WEIR/m/1024/hot"
run_wrk $WEIR_PID "http://127.0.0.1:$P_WEIR/m/1024/hot" -t1 -c4 -d"$DUR"
echo "| memory hit alone | weir | $RPS | $P99_US | $CPU_US_PER_REQ |" >> "$OUT"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
taskset -c "$LOAD_CORE" wrk -t1 -c32 -d"$DUR" -s "$TMP/random-1048576.lua" "http://127.0.0.1:$P_WEIR/" >/dev/null 2>&1 &
BG=$!
sleep 0.5
run_wrk $WEIR_PID "http://127.0.0.1:$P_WEIR/m/1024/hot" -t1 -c4 -d"$DUR"
wait $BG || true
echo "| memory hit beside 32 connections of cold 1 MiB disk reads | weir | $RPS | $P99_US | |" >> "$OUT"

# --- the key-value store
cat > "$TMP/put.lua" <<'LUA'
local body = string.rep("v", tonumber(os.getenv("KV_SIZE")))
local n = 0
request = function()
  n = n + 1
  return wrk.format("PUT", "/kv/p" .. (n % 10000), { ["Content-Type"] = "text/plain" }, body)
end
LUA
{
  echo
  echo "## Key-value store (values logged to disk, not synced) beside a memory cache hit and Redis"
  echo
  echo "| value | operation | req/s | p99 µs | CPU µs/req | vs cache hit |"
  echo "|---|---|---:|---:|---:|---:|"
} >> "$OUT"
for size in 100 4096; do
  head -c "$size" /dev/zero | tr '\0' 'v' | curl -s -o /dev/null -X PUT --data-binary @- "http://127.0.0.1:$P_WEIR/kv/get$size"
  curl -s -o /dev/null "http://127.0.0.1:$P_WEIR/m/$size/hit"
  run_wrk $WEIR_PID "http://127.0.0.1:$P_WEIR/m/$size/hit" -t1 -c16 -d"$DUR"; hit=$CPU_US_PER_REQ
  echo "| $size B | cache hit (memory) | $RPS | $P99_US | $hit | 1.00 |" >> "$OUT"
  run_wrk $WEIR_PID "http://127.0.0.1:$P_WEIR/kv/get$size" -t1 -c16 -d"$DUR"
  echo "| $size B | kv GET | $RPS | $P99_US | $CPU_US_PER_REQ | $(ratio "$CPU_US_PER_REQ" "$hit") |" >> "$OUT"
  KV_SIZE=$size run_wrk $WEIR_PID "http://127.0.0.1:$P_WEIR/" -t1 -c16 -d"$DUR" -s "$TMP/put.lua"
  echo "| $size B | kv PUT | $RPS | $P99_US | $CPU_US_PER_REQ | $(ratio "$CPU_US_PER_REQ" "$hit") |" >> "$OUT"
done
taskset -c "$SUT_CORE" redis-server --port $P_REDIS --save '' --appendonly no --daemonize no >"$TMP/redis.log" 2>&1 &
REDIS=$!; track $REDIS; wait_port $P_REDIS "$TMP/redis.log"
for size in 100 4096; do
  for op in get set; do
    t0=$(cpu_ticks $REDIS)
    taskset -c "$LOAD_CORE" redis-benchmark -p $P_REDIS -c 16 -n 200000 -d "$size" -t "$op" -q > "$TMP/rb.out" 2>&1
    t1=$(cpu_ticks $REDIS)
    rps=$(tr '\r' '\n' < "$TMP/rb.out" | grep 'requests per second' | tail -1 | sed -E 's/.*: ([0-9.]+) requests.*/\1/' | awk '{printf "%.0f", $1}')
    p50=$(tr '\r' '\n' < "$TMP/rb.out" | grep -o 'p50=[0-9.]*' | tail -1 | cut -d= -f2)
    cpu=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", d * 1e6 / hz / 200000 }')
    echo "| $size B | redis $op (redis-benchmark -c16, no persistence; p50 ms $p50) | $rps | | $cpu | |" >> "$OUT"
  done
done

# --- restart with N objects on disk
{
  echo
  echo "## Restart with N objects on disk (100 B bodies)"
  echo
  echo "| objects | first hit after start (ms) | index load (ms) | RSS after load (MiB) | RSS empty (MiB) | index bytes/object |"
  echo "|---:|---:|---:|---:|---:|---:|"
} >> "$OUT"
cat > "$TMP/fill.lua" <<'LUA'
local n = tonumber(os.getenv("FILL_FROM"))
request = function() n = n + 1; return wrk.format(nil, "/100/f" .. n) end
LUA
kill $WEIR_PID; wait $WEIR_PID 2>/dev/null || true
# Empty directories: the baseline RSS holds no kv values and no index.
rm -rf "$TMP/weir-disk" "$TMP/weir-kv"; start_weir; wait_port $P_WEIR "$TMP/weir.log"
sleep 0.5
rss_empty=$(rss_kib $WEIR_PID)
filled=0
for target in 100000 1000000; do
  [ "$QUICK" = --quick ] && [ "$target" = 1000000 ] && break
  while [ "$(metric 'weir_cache_disk_objects{zone="small"}')" -lt "$target" ]; do
    FILL_FROM=$filled taskset -c "$LOAD_CORE" wrk -t1 -c16 -d5s -s "$TMP/fill.lua" "http://127.0.0.1:$P_WEIR/" > "$TMP/fill.out" 2>&1 || true
    filled=$((filled + $(awk '/requests in/ {print $1}' "$TMP/fill.out") + 1))
  done
  objects=$(metric 'weir_cache_disk_objects{zone="small"}')
  kill $WEIR_PID; wait $WEIR_PID 2>/dev/null || true
  t0=$(date +%s%N)
  start_weir
  for _ in $(seq 1 6000); do
    curl -s -D - -o /dev/null "http://127.0.0.1:$P_WEIR/100/f1" 2>/dev/null | grep -qi 'cache-status:.*hit' && break
    sleep 0.005
  done
  first=$(( ($(date +%s%N) - t0) / 1000000 ))
  load=$(metric 'weir_cache_disk_load_seconds{zone="small"}' | awk '{ printf "%.0f", $1 * 1000 }')
  rss=$(rss_kib $WEIR_PID)
  per=$(awk -v a="$rss" -v b="$rss_empty" -v n="$objects" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
  echo "| $objects | $first | $load | $((rss / 1024)) | $((rss_empty / 1024)) | $per |" >> "$OUT"
  log "restart with $objects objects: first hit after $first ms, load $load ms"
done
log "results in $OUT"
cat "$OUT"
