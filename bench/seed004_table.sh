#!/usr/bin/env bash
# Seed 004 (lua-t vs node.js vs Go, small payloads): a 0.15 kB response, keep-alive and one
# request per connection, swept over 1…1000 connections with weir bench, in the seed's own table
# shape, for weir, nginx and — when present on the machine — node.js and Go servers, each on core
# 0 with one worker; plus each server's memory (RSS) after the runs, as the seed reports.
# Usage: bench/seed004_table.sh [--quick]   (results in bench/results/seed004-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=3s; CONNS=1,5,10,50,100,200,500,800,1000
[ "${1:-}" = "--quick" ] && { DUR=1s; CONNS=1,10,100; }
ensure_pkgs nginx-light
build_weir
raise_nofile

PAYLOAD=$(head -c 150 /dev/zero | tr '\0' 'p')
P_WEIR=18480; P_NGINX=18481; P_NODE=18482; P_GO=18483
cat > "$TMP/weir.yaml" <<YAML
workers: 1
listeners:
  - address: 127.0.0.1:$P_WEIR
    routes:
      - respond: { body: "$PAYLOAD" }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID
nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 10000;
  server { listen 127.0.0.1:$P_NGINX reuseport backlog=4096; location / { default_type text/plain; return 200 "$PAYLOAD"; } }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED
wait_port $P_WEIR "$TMP/weir.log"; wait_port $P_NGINX "$TMP/nginx/error.log"
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)
SYSTEMS=("weir $WEIR_PID $P_WEIR" "nginx $NGINX_PID $P_NGINX")
if command -v node >/dev/null 2>&1; then
  cat > "$TMP/server.js" <<JS
require('http').createServer((req, res) => { res.writeHead(200, {'Content-Type': 'text/plain'}); res.end('$PAYLOAD'); }).listen($P_NODE, '127.0.0.1');
JS
  taskset -c "$SUT_CORE" node "$TMP/server.js" &
  NODE_PID=$!; track $NODE_PID
  wait_port $P_NODE && SYSTEMS+=("node $NODE_PID $P_NODE")
fi
if command -v go >/dev/null 2>&1; then
  mkdir -p "$TMP/gosrv"
  printf 'package main\nimport ("net/http";"os")\nfunc main(){http.HandleFunc("/",func(w http.ResponseWriter,r *http.Request){w.Write([]byte("%s"))});http.ListenAndServe(os.Args[1],nil)}\n' "$PAYLOAD" > "$TMP/gosrv/main.go"
  if (cd "$TMP/gosrv" && GOFLAGS= GOTOOLCHAIN=local go build -o gosrv main.go) 2>"$TMP/go.log"; then
    GOMAXPROCS=1 taskset -c "$SUT_CORE" "$TMP/gosrv/gosrv" 127.0.0.1:$P_GO &
    GO_PID=$!; track $GO_PID
    wait_port $P_GO && SYSTEMS+=("go $GO_PID $P_GO")
  fi
fi

OUT="$ROOT/bench/results/seed004-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# seed 004: small payloads (0.15 kB) — weir vs nginx$( [ -n "${NODE_PID:-}" ] && echo " vs node.js")$( [ -n "${GO_PID:-}" ] && echo " vs Go")"
  echo
  machine_info
  command -v node >/dev/null && echo "- node: $(node --version)"
  command -v go >/dev/null && echo "- go: $(go version | awk '{print $3}')"
  echo "- command: \`bench/seed004_table.sh ${1:-}\`; load: \`weir bench -t1 -d$DUR --sweep-conns $CONNS --format table\` on core $LOAD_CORE"
  echo
} > "$OUT"
for mode in keep-alive close; do
  for s in "${SYSTEMS[@]}"; do
    read -r name pid port <<<"$s"
    extra=(); [ "$mode" = close ] && extra=(--close)
    log "$name ($mode): sweeping $CONNS"
    {
      echo "## $name ($mode)"
      echo
      echo '```'
      taskset -c "$LOAD_CORE" "$WEIR" bench -t1 -d"$DUR" --sweep-conns "$CONNS" --format table "${extra[@]}" \
        --target "$name=http://127.0.0.1:$port/" --pid "$name=$pid" 2>/dev/null
      echo '```'
      echo
    } >> "$OUT"
  done
done
{
  echo "## Memory after the runs (VmRSS of the serving process)"
  echo
  echo "| server | RSS KiB |"
  echo "|---|---:|"
  for s in "${SYSTEMS[@]}"; do read -r name pid port <<<"$s"; echo "| $name | $(rss_kib "$pid") |"; done
} >> "$OUT"
cat "$OUT"
log "results written to ${OUT#$ROOT/}"
