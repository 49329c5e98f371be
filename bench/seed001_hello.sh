#!/usr/bin/env bash
# Seed 001 (Go net/http vs nginx, plain hello and json responses as connections grow), with
# weir bench as the load generator: weir (examples/hello.yaml), nginx (`return 200`) and, when a Go
# toolchain is on the machine, a Go net/http server — each one worker/GOMAXPROCS=1 on core 0,
# weir bench -t1 on core 1. One 004-shape table per server and path, server CPU µs/request, and
# an SVG chart of requests/s and p99 against connections per path.
# Usage: bench/seed001_hello.sh [--quick]   (results in bench/results/seed001-<date>.md/.svg)
source "$(dirname "$0")/lib.sh"
DUR=5s; CONNS=8,16,32,128,512
[ "${1:-}" = "--quick" ] && { DUR=1s; CONNS=8,128,512; }
ensure_pkgs nginx-light
build_weir
raise_nofile

P_WEIR=18380; P_NGINX=18381; P_GO=18382
WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$P_WEIR taskset -c "$SUT_CORE" "$WEIR" run -c "$ROOT/examples/hello.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID
nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 10000;
  server {
    listen 127.0.0.1:$P_NGINX reuseport backlog=4096;
    location = /hello { default_type text/plain; return 200 "Hello, World\n"; }
    location = /json { default_type application/json; return 200 '{"message":"Hello, World!"}'; }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED
wait_port $P_WEIR "$TMP/weir.log"; wait_port $P_NGINX "$TMP/nginx/error.log"
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)
SYSTEMS=("weir $WEIR_PID $P_WEIR" "nginx $NGINX_PID $P_NGINX")

if command -v go >/dev/null 2>&1; then
  mkdir -p "$TMP/gosrv"
  cat > "$TMP/gosrv/main.go" <<'GO'
package main

import (
	"encoding/json"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("Hello, World\n")) })
	http.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"message": "Hello, World!"})
	})
	http.ListenAndServe(os.Args[1], nil)
}
GO
  if (cd "$TMP/gosrv" && GOFLAGS= GOTOOLCHAIN=local go build -o gosrv main.go) 2>"$TMP/go.log"; then
    GOMAXPROCS=1 taskset -c "$SUT_CORE" "$TMP/gosrv/gosrv" 127.0.0.1:$P_GO &
    GO_PID=$!; track $GO_PID
    wait_port $P_GO && SYSTEMS+=("go $GO_PID $P_GO")
  else
    log "Go server not built (see below); continuing without it"; cat "$TMP/go.log" >&2
  fi
fi

STAMP=$(date -u +%Y%m%d-%H%M)
OUT="$ROOT/bench/results/seed001-$STAMP.md"
{
  echo "# seed 001: plain hello/json as connections grow — weir vs nginx${GO_PID:+ vs Go net/http}"
  echo
  machine_info
  echo "- command: \`bench/seed001_hello.sh ${1:-}\`; load: \`weir bench -t1 -d$DUR --sweep-conns $CONNS\` on core $LOAD_CORE"
  echo
} > "$OUT"
for path in hello json; do
  args=()
  for s in "${SYSTEMS[@]}"; do
    read -r name pid port <<<"$s"
    args+=(--target "$name=http://127.0.0.1:$port/$path" --pid "$name=$pid")
  done
  chart="bench/results/seed001-$STAMP-$path.svg"
  log "/$path: sweeping $CONNS over ${#SYSTEMS[@]} servers"
  {
    echo "## /$path"
    echo
    echo '```'
    taskset -c "$LOAD_CORE" "$WEIR" bench -t1 -d"$DUR" --sweep-conns "$CONNS" --format table --chart "$ROOT/$chart" \
      --title "seed 001: /$path" "${args[@]}" 2>/dev/null
    echo '```'
    echo
    echo "Chart: [$(basename "$chart")]($(basename "$chart"))"
    echo
  } >> "$OUT"
done
cat "$OUT"
log "results written to ${OUT#$ROOT/}"
