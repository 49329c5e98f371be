#!/usr/bin/env bash
# Memory per idle keep-alive connection: 10,000 connections, each after one request, held open;
# the growth of the serving process's RSS divided by their number. weir (examples/hello.yaml,
# 1 worker) next to nginx (`return 200`, 1 worker), and an older weir build when OLD_WEIR (a
# path) or OLD_REV (a git revision, built in a worktree) is given. The same measurement as the
# idle row of bench/core.sh, on its own (about a minute).
# Usage: bench/idle_memory.sh [IDLE]   (results in bench/results/idle-<date>.md)
source "$(dirname "$0")/lib.sh"
IDLE=${1:-10000}
ensure_pkgs nginx-light python3
build_weir
raise_nofile
if [ -z "${OLD_WEIR:-}" ] && [ -n "${OLD_REV:-}" ]; then
  log "building $OLD_REV (release) in a worktree"
  git -C "$ROOT" worktree add -q --detach "$TMP/old" "$OLD_REV"
  (cd "$TMP/old" && CARGO_TARGET_DIR="$TMP/old-target" cargo build --release -q)
  OLD_WEIR="$TMP/old-target/release/weir"
  git -C "$ROOT" worktree remove --force "$TMP/old"
fi

start_weir() { # bin port -> STARTED
  WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$2 taskset -c "$SUT_CORE" "$1" run -c "$ROOT/examples/hello.yaml" \
    >/dev/null 2>"$TMP/weir-$2.log" &
  STARTED=$!; track $STARTED
  wait_port "$2" "$TMP/weir-$2.log"
}
per_conn() { awk -v a="$1" -v b="$2" -v n="$IDLE" 'BEGIN { printf "%.2f", (b - a) / n }'; }

ROWS=()
start_weir "$WEIR" 18780; read -r b a < <(idle_rss $STARTED 18780)
ROWS+=("| weir $(git -C "$ROOT" rev-parse --short HEAD) | $b | $a | $(per_conn "$b" "$a") |")
if [ -n "${OLD_WEIR:-}" ]; then
  start_weir "$OLD_WEIR" 18781; read -r b a < <(idle_rss $STARTED 18781)
  ROWS+=("| weir ${OLD_REV:-$OLD_WEIR} | $b | $a | $(per_conn "$b" "$a") |")
fi
nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_timeout 60s;
  server { listen 127.0.0.1:18782 reuseport backlog=4096;
           location = /hello { default_type text/plain; return 200 "Hello, World\n"; } }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; wait_port 18782 "$TMP/nginx/error.log"
NGINX_PID=$(pgrep -P "$NGINX_STARTED" | head -1)
read -r b a < <(idle_rss "$NGINX_PID" 18782)
ROWS+=("| nginx | $b | $a | $(per_conn "$b" "$a") |")

OUT="$ROOT/bench/results/idle-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# memory per idle keep-alive connection ($IDLE connections, one request each)"
  echo
  machine_info
  echo
  echo "| server | RSS before KiB | RSS with $IDLE idle KiB | KiB per connection |"
  echo "|---|---:|---:|---:|"
  printf '%s\n' "${ROWS[@]}"
} > "$OUT"
cat "$OUT"
log "results in $OUT"
