#!/usr/bin/env bash
# Memory per idle connection: IDLE connections (default 10,000), each after one request, held
# open; the growth of the serving process's RSS divided by their number, read IDLE_SETTLE
# seconds (default 3) after the last answer. Three kinds of connection: plain HTTP/1.1
# keep-alive, HTTP/1.1 over TLS 1.3 and HTTP/2 over TLS 1.3 (one GET on stream 1), each served
# by weir (1 worker), nginx (1 worker) and HAProxy (1 thread) in the same run, all on core 0.
# An older weir build is added to the plain row when OLD_WEIR (a path) or OLD_REV (a git
# revision, built in a worktree) is given.
# HAProxy needs 2 descriptors per connection and stays under the hard limit (20000 here): its
# TLS rows use what fits, and say how many.
# Usage: bench/idle_memory.sh [IDLE]   (results in bench/results/idle-<date>.md)
source "$(dirname "$0")/lib.sh"
IDLE=${1:-10000}
ensure_pkgs nginx-light haproxy python3 openssl
build_weir
raise_nofile
if [ -z "${OLD_WEIR:-}" ] && [ -n "${OLD_REV:-}" ]; then
  log "building $OLD_REV (release) in a worktree"
  git -C "$ROOT" worktree add -q --detach "$TMP/old" "$OLD_REV"
  (cd "$TMP/old" && CARGO_TARGET_DIR="$TMP/old-target" cargo build --release -q)
  OLD_WEIR="$TMP/old-target/release/weir"
  git -C "$ROOT" worktree remove --force "$TMP/old"
fi
HAP_MAXCONN=$(( ($(ulimit -n) - 200) / 2 ))
HAP_IDLE=$(( IDLE < HAP_MAXCONN - 100 ? IDLE : HAP_MAXCONN - 100 ))
cd "$TMP"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -keyout key.pem -out cert.pem -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
cat cert.pem key.pem > combined.pem

# weir: plain on 18780, TLS (h1 and h2) on 18790; answers hello everywhere.
cat > weir.yaml <<YAML
workers: 1
listeners:
  - address: \${WEIR_LISTEN}
    routes:
      - respond: { body: "Hello, World\n" }
  - address: \${WEIR_TLS_LISTEN}
    tls:
      certificates: [{ cert: $TMP/cert.pem, key: $TMP/key.pem }]
      protocols: [tls1.3]
    routes:
      - respond: { body: "Hello, World\n" }
YAML
start_weir() { # bin plain-port tls-port -> STARTED
  WEIR_LISTEN=127.0.0.1:$2 WEIR_TLS_LISTEN=127.0.0.1:$3 taskset -c "$SUT_CORE" "$1" run -c weir.yaml \
    >/dev/null 2>"$TMP/weir-$2.log" &
  STARTED=$!; track $STARTED
  wait_port "$2" "$TMP/weir-$2.log"; wait_port "$3" "$TMP/weir-$2.log"
}
per_conn() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.2f", (b - a) / n }'; }

# Each server gets its own process per kind (RSS growth of one kind is not mixed with another's).
declare -A ROW
measure() { # name kind pid port count
  local b a
  read -r b a < <(idle_rss "$3" "$4" /hello "$2" "$5")
  ROW[$1.$2]="$5 $b $a $(per_conn "$b" "$a" "$5")"
  log "$1 $2: $(per_conn "$b" "$a" "$5") KiB per idle connection ($5 connections)"
}
for kind in plain tls h2; do
  start_weir "$WEIR" 18780 18790
  if [ $kind = plain ]; then port=18780; else port=18790; fi
  measure weir $kind $STARTED $port "$IDLE"
  kill $STARTED; wait $STARTED 2>/dev/null || true
done
if [ -n "${OLD_WEIR:-}" ]; then
  start_weir "$OLD_WEIR" 18781 18791
  measure weir-old plain $STARTED 18781 "$IDLE"
  kill $STARTED; wait $STARTED 2>/dev/null || true
fi

for kind in plain tls h2; do
  nginx_conf "$TMP/nginx-$kind" <<NGX
  access_log off;
  keepalive_timeout 60s;
  keepalive_requests 1000000;
  ssl_certificate $TMP/cert.pem;
  ssl_certificate_key $TMP/key.pem;
  ssl_protocols TLSv1.3;
  server { listen 127.0.0.1:18782 reuseport backlog=4096;
           location / { default_type text/plain; return 200 "Hello, World\n"; } }
  server { listen 127.0.0.1:18792 ssl http2 reuseport backlog=4096;
           location / { default_type text/plain; return 200 "Hello, World\n"; } }
NGX
  start_nginx "$TMP/nginx-$kind" "$SUT_CORE"; wait_port 18782 "$TMP/nginx-$kind/error.log"
  NGINX_PID=$(pgrep -P "$NGINX_STARTED" | head -1)
  if [ $kind = plain ]; then port=18782; else port=18792; fi
  measure nginx $kind "$NGINX_PID" $port "$IDLE"
  kill "$NGINX_STARTED"; wait "$NGINX_STARTED" 2>/dev/null || true
  sleep 0.5
done

haproxy_conf haproxy.cfg <<HAP
frontend plain
  bind 127.0.0.1:18783
  timeout client 120s
  http-request return status 200 content-type text/plain string "Hello, World"
frontend tls
  bind 127.0.0.1:18793 ssl crt $TMP/combined.pem alpn h2,http/1.1 ssl-min-ver TLSv1.3
  timeout client 120s
  http-request return status 200 content-type text/plain string "Hello, World"
HAP
sed -i "s/maxconn 8000/maxconn $HAP_MAXCONN/" haproxy.cfg
for kind in plain tls h2; do
  taskset -c "$SUT_CORE" haproxy -f haproxy.cfg -db >haproxy.log 2>&1 &
  HAP_PID=$!; track $HAP_PID
  wait_port 18783 haproxy.log; wait_port 18793 haproxy.log
  if [ $kind = plain ]; then port=18783; n=$IDLE; else port=18793; n=$HAP_IDLE; fi
  [ "$n" -gt "$HAP_MAXCONN" ] && n=$((HAP_MAXCONN - 100))
  measure haproxy $kind $HAP_PID $port "$n"
  kill $HAP_PID; wait $HAP_PID 2>/dev/null || true
done

OUT="$ROOT/bench/results/idle-$(date -u +%Y%m%d-%H%M).md"
f() { echo "${ROW[$1]}" | awk -v i="$2" '{print $i}'; }
{
  echo "# memory per idle connection (up to $IDLE connections, one request each, RSS read ${IDLE_SETTLE:-3} s after)"
  echo
  machine_info
  echo "- haproxy: $(haproxy -v 2>&1 | head -1 | awk '{print $3}'), $(openssl version); TLS 1.3, ECDSA P-256"
  echo
  echo "| server | connection | connections | RSS before KiB | RSS with them idle KiB | KiB per connection |"
  echo "|---|---|---:|---:|---:|---:|"
  for key in weir.plain weir-old.plain nginx.plain haproxy.plain weir.tls nginx.tls haproxy.tls weir.h2 nginx.h2 haproxy.h2; do
    [ -n "${ROW[$key]:-}" ] || continue
    name=${key%.*}; [ "$name" = weir ] && name="weir $(git -C "$ROOT" rev-parse --short HEAD)"
    [ "$name" = weir-old ] && name="weir ${OLD_REV:-$OLD_WEIR}"
    kind=${key#*.}; case $kind in plain) kind="HTTP/1.1" ;; tls) kind="HTTP/1.1 over TLS" ;; h2) kind="HTTP/2 over TLS" ;; esac
    echo "| $name | $kind | $(f "$key" 1) | $(f "$key" 2) | $(f "$key" 3) | $(f "$key" 4) |"
  done
} > "$OUT"
cat "$OUT"
log "results in $OUT"
