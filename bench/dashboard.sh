#!/usr/bin/env bash
# The admin dashboard in headless Chromium under load: weir (core 0) serves a cached route, a
# proxied route over two origin servers (weir listeners too) and some 404s; three `weir bench`
# runs (core 1) keep it busy, and bench/tools/dashboard_check.py loads the page over the
# DevTools protocol, checks figures on first paint, that they move and match /metrics, that
# the Drain/Enable, reload and purge buttons work, and saves a screenshot to
# bench/results/dashboard-<date>.png.
# Usage: bench/dashboard.sh
source "$(dirname "$0")/lib.sh"
ensure_pkgs chromium curl python3-venv
build_weir
python3 -m venv "$TMP/venv" >/dev/null
"$TMP/venv/bin/pip" install -q websocket-client >/dev/null
PORT=18690; ADMIN=18691; ORIGIN=18692; ORIGIN2=18693
cat > "$TMP/weir.yaml" <<YAML
workers: 1
admin: { address: 127.0.0.1:$ADMIN }
cache_zones: { main: { max_size: 16m } }
upstreams: { origin: { servers: ["127.0.0.1:$ORIGIN", "127.0.0.1:$ORIGIN2"] } }
listeners:
  - address: 127.0.0.1:$PORT
    routes:
      - name: pages
        match: { path_prefix: /page }
        proxy: { upstream: origin }
        cache: { zone: main, ttl: { "200": 1h }, ignore_origin: true }
      - name: api
        match: { path_prefix: /api/ }
        proxy: { upstream: origin }
  - address: 127.0.0.1:$ORIGIN
    routes:
      - { match: { path: /api/missing }, respond: { status: 404, body: "no such thing" } }
      - respond: { body: "an object from origin one" }
  - address: 127.0.0.1:$ORIGIN2
    routes:
      - { match: { path: /api/missing }, respond: { status: 404, body: "no such thing" } }
      - respond: { body: "an object from origin two" }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
track $!
wait_port $PORT "$TMP/weir.log"
for url in /page /api/items; do
  taskset -c "$LOAD_CORE" "$WEIR" bench -c 8 -d 40s "http://127.0.0.1:$PORT$url" >/dev/null 2>&1 &
  track $!
done
taskset -c "$LOAD_CORE" "$WEIR" bench -c 2 --rate 200 -d 40s "http://127.0.0.1:$PORT/api/missing" >/dev/null 2>&1 &
track $!
sleep 1
SHOT="$ROOT/bench/results/dashboard-$(date -u +%Y%m%d-%H%M).png"
"$TMP/venv/bin/python" "$ROOT/bench/tools/dashboard_check.py" "http://127.0.0.1:$ADMIN" "$SHOT"
