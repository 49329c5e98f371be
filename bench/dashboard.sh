#!/usr/bin/env bash
# The admin dashboard in headless Chromium under load: weir (core 0) serves a cached route and
# its origin, `weir bench -c 20` (core 1) keeps it busy, and bench/tools/dashboard_check.py loads
# the page over the DevTools protocol, checks that its numbers move and match /metrics, and
# saves a screenshot to bench/results/dashboard-<date>.png.
# Usage: bench/dashboard.sh
source "$(dirname "$0")/lib.sh"
ensure_pkgs chromium curl python3-venv
build_weir
python3 -m venv "$TMP/venv" >/dev/null
"$TMP/venv/bin/pip" install -q websocket-client >/dev/null
PORT=18690; ADMIN=18691; ORIGIN=18692
cat > "$TMP/weir.yaml" <<YAML
workers: 1
admin: { address: 127.0.0.1:$ADMIN }
cache_zones: { main: { max_size: 16m } }
upstreams: { origin: { servers: ["127.0.0.1:$ORIGIN"] } }
listeners:
  - address: 127.0.0.1:$PORT
    routes:
      - proxy: { upstream: origin }
        cache: { zone: main, ttl: { "200": 1h }, ignore_origin: true }
  - address: 127.0.0.1:$ORIGIN
    routes:
      - respond: { body: "a cached object from the origin" }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
track $!
wait_port $PORT "$TMP/weir.log"
taskset -c "$LOAD_CORE" "$WEIR" bench -c 20 -d 30s "http://127.0.0.1:$PORT/page" >/dev/null 2>&1 &
track $!
sleep 1
SHOT="$ROOT/bench/results/dashboard-$(date -u +%Y%m%d-%H%M).png"
"$TMP/venv/bin/python" "$ROOT/bench/tools/dashboard_check.py" "http://127.0.0.1:$ADMIN" "$SHOT"
