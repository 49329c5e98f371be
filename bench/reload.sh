#!/usr/bin/env bash
# Reloads and a binary upgrade under load: weir (1 worker, core 0, --upgrade-socket) serves a
# fixed response and a cached proxy route while `weir bench -c 100` (core 1) runs for 13 s;
# meanwhile the config file is rewritten and weir gets SIGHUP 20 times (every 0.5 s), then a
# second `weir run` with the same --upgrade-socket takes over the listening sockets and the
# first drains and exits. Counts failed requests (connect/read/write errors, timeouts,
# non-2xx), checks that the last config answers, and that the cache kept serving hits across
# the reloads (the origin's request count).
# Usage: bench/reload.sh    (results in bench/results/reload-<date>.md)
source "$(dirname "$0")/lib.sh"
ensure_pkgs nginx-light curl
build_weir
raise_nofile
ORIGIN=19501; PORT=18590; ADMIN=18591; RELOADS=${RELOADS:-20}
file_origin "$ORIGIN" 1024
write_cfg() { # version
  cat > "$TMP/weir.yaml" <<YAML
workers: 1
cache_zones: { main: { max_size: 64m } }
admin: { address: 127.0.0.1:$ADMIN }
upstreams: { origin: { servers: ["127.0.0.1:$ORIGIN"] } }
listeners:
  - address: 127.0.0.1:$PORT
    routes:
      - match: { path: /version }
        respond: { status: 200, body: "v$1" }
      - proxy: { upstream: origin }
        cache: { zone: main, ttl: { "200": 1h }, ignore_origin: true }
YAML
}
write_cfg 0
SOCK="$TMP/upgrade.sock"
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" --upgrade-socket "$SOCK" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID
wait_port $PORT "$TMP/weir.log"
curl -s -o /dev/null "http://127.0.0.1:$PORT/s1024"
misses() { curl -s "http://127.0.0.1:$ADMIN/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["zones"]["main"]["misses"])'; }
misses_before=$(misses)

taskset -c "$LOAD_CORE" "$WEIR" bench -c 100 -d 13s --format json \
  "http://127.0.0.1:$PORT/s1024" > "$TMP/bench.json" 2>"$TMP/bench.err" &
BENCH=$!
sleep 0.5
for i in $(seq 1 "$RELOADS"); do
  write_cfg "$i"
  kill -HUP $WEIR_PID
  sleep 0.45
done
misses_after=$(misses)
# The binary upgrade: a second process on the same sockets; the first drains and exits.
write_cfg upgraded
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" --upgrade-socket "$SOCK" 2>"$TMP/weir-new.log" &
NEW_PID=$!; track $NEW_PID
up_start=$(date +%s.%N)
for _ in $(seq 1 1500); do kill -0 $WEIR_PID 2>/dev/null || break; sleep 0.01; done
up_secs=$(awk -v a="$up_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
old_exit=$(wait $WEIR_PID 2>/dev/null; echo $?)
wait $BENCH
alive=$(kill -0 $NEW_PID 2>/dev/null && echo yes || echo no)
version=$(curl -s "http://127.0.0.1:$PORT/version")
reloaded=$(grep -c "weir::cli.*reloaded" "$TMP/weir.log" || true)
took_over=$(grep -c "took over the listening sockets" "$TMP/weir-new.log" || true)
failed_reloads=$(grep -c "reload failed" "$TMP/weir.log" || true)
read -r total ok errs < <(python3 - "$TMP/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
ok = sum(v for k, v in r["statuses"].items() if k.startswith("2"))
e = r["errors"]
errs = e["connect"] + e["read"] + e["write"] + e["timeout"] + e["status"]
print(r["requests"], ok, errs)
PY
)
OUT="$ROOT/bench/results/reload-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# reloads and a binary upgrade under load: $RELOADS × SIGHUP in 10 s, then one upgrade; weir bench -c 100 for 13 s"
  echo
  machine_info
  echo
  echo "| requests | 2xx | failed (errors + non-2xx) | reloads done | reloads failed | cache misses before → after the reloads | upgrade: took over | old process: exit status, seconds to drain | new process alive | /version after |"
  echo "|---:|---:|---:|---:|---:|---|---|---|---|---|"
  echo "| $total | $ok | $((total - ok + errs)) | $reloaded | $failed_reloads | $misses_before → $misses_after | $took_over | $old_exit, $up_secs s | $alive | $version |"
  echo
  echo "Every request is for one 1 KiB object cached before the run: unchanged misses mean the"
  echo "zone and its object survived every reload (the requests were all hits). The upgraded"
  echo "process starts with its own, empty zone: cache contents do not cross processes."
} > "$OUT"
cat "$OUT"
log "results in $OUT"
