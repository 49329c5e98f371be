#!/usr/bin/env bash
# Proof under attack (issue 21): a legitimate client on 127.0.0.1 at a fixed open-loop rate
# (`weir bench -R`) while attackers on 127.0.0.2-127.0.0.9 flood the server, side by side:
#   weir-open  examples/hello.yaml: no shield (the unprotected baseline)
#   weir       examples/shield.yaml: 50 connections and 100 r/s (burst 20) per client, 10 s block
#   nginx      limit_conn 50, limit_req rate=100r/s burst=20 nodelay (429 for both)
#   floor      bench/tools/bare_epoll.c (HTTP/1.1 floods only: what the kernel alone costs)
#   haproxy    stick table: tcp-request connection reject over 50 open, http-request deny 429
#              over 100 r/s (sc_conn_cur, sc_http_req_rate)
# Scenarios: none, a connection flood (a new connection per request, as fast as the attack tool
# goes), a request flood on keep-alive connections, slowloris and slow POST (slowhttptest, from
# 127.0.0.2-9 through bench/tools/bindsrc.c), and HTTP/2 rapid reset (HEADERS + RST_STREAM).
# Per cell: the legitimate client's success rate and p99, the server's CPU per rejected
# connection or request (user+sys from /proc/PID/stat over the attack, ÷ what the attack tool saw
# refused or answered 429), its core's busy %, and its RSS at the end of the attack.
# Every server runs one worker on core 0; attack tools and the legitimate client on core 1, the
# attack tools at idle priority (`chrt --idle`) so that the legitimate client's latency is the
# server's doing, not the load core's queue.
# Usage: bench/ddos.sh [--quick]   (results in bench/results/ddos-<date>.md)
source "$(dirname "$0")/lib.sh"
ATTACK=8; LEGIT_S=5; LEGIT_RATE=50; FLOOD_CONNS=256
[ "${1:-}" = "--quick" ] && { ATTACK=5; LEGIT_S=3; }
ensure_pkgs nginx-light haproxy slowhttptest curl
build_weir
raise_nofile
cc -O2 -o "$TMP/flood" "$BENCH_DIR/tools/flood.c"
cc -O2 -shared -fPIC -o "$TMP/bindsrc.so" "$BENCH_DIR/tools/bindsrc.c" -ldl
cc -O2 -o "$TMP/bare_epoll" "$BENCH_DIR/tools/bare_epoll.c"

# Ports: each server has a plain port and an h2c port (weir serves both on one).
WO=18461; WS=18462; NP=18463; NP2=18464; HP=18465; HP2=18466; FP=18467; ADM=18469; ADM2=18470
h2c() { sed 's/^  - address: \(.*\)$/  - address: \1\n    h2c: true/' "$1"; }
h2c examples/hello.yaml > "$TMP/open.yaml"
h2c examples/shield.yaml > "$TMP/shield.yaml"
cp -r examples/www "$TMP/www"
# nginx answers from a file: `return` runs in the rewrite phase, before limit_conn and limit_req
# (which would then never apply).
chmod 755 "$TMP"; mkdir -p "$TMP/ngx"; printf 'Hello, World\n' > "$TMP/ngx/hello"; chmod -R a+rX "$TMP/ngx"

nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  limit_conn_zone \$binary_remote_addr zone=perip:10m;
  limit_req_zone \$binary_remote_addr zone=rate:10m rate=100r/s;
  limit_conn_status 429;
  limit_req_status 429;
  limit_conn_log_level info;
  limit_req_log_level info;
  server {
    listen 127.0.0.1:$NP;
    listen 127.0.0.1:$NP2 http2;
    limit_conn perip 50;
    limit_req zone=rate burst=20 nodelay;
    location = /hello { root $TMP/ngx; default_type text/plain; }
  }
NGX
haproxy_conf "$TMP/haproxy.cfg" <<HAP
frontend fe
  bind 127.0.0.1:$HP
  bind 127.0.0.1:$HP2 proto h2
  timeout http-request 10s
  stick-table type ip size 100k expire 30s store conn_cur,http_req_rate(1s)
  tcp-request connection track-sc0 src
  tcp-request connection reject if { sc_conn_cur(0) gt 50 }
  http-request deny deny_status 429 if { sc_http_req_rate(0) gt 100 }
  http-request return status 200 content-type text/plain string "Hello, World\n"
HAP

declare -A PID PORT PORT2
start_weir() { # name config admin port
  WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$4 WEIR_ADMIN=127.0.0.1:$3 WEIR_ROOT="$TMP/www" \
    taskset -c "$SUT_CORE" "$WEIR" run -c "$2" 2>"$TMP/$1.log" &
  PID[$1]=$!; track "${PID[$1]}"; PORT[$1]=$4; PORT2[$1]=$4
  wait_port "$4" "$TMP/$1.log"
}
start_weir weir-open "$TMP/open.yaml" $ADM2 $WO
start_weir weir "$TMP/shield.yaml" $ADM $WS
start_nginx "$TMP/nginx" "$SUT_CORE"; PID[nginx]=$NGINX_STARTED; PORT[nginx]=$NP; PORT2[nginx]=$NP2
wait_port $NP "$TMP/nginx/error.log"
taskset -c "$SUT_CORE" haproxy -f "$TMP/haproxy.cfg" -db 2>"$TMP/haproxy.log" &
PID[haproxy]=$!; track "${PID[haproxy]}"; PORT[haproxy]=$HP; PORT2[haproxy]=$HP2
wait_port $HP "$TMP/haproxy.log"
# The floor: bare_epoll answers every request with one read and one write, no HTTP, no limits
# (what the kernel alone costs per connection or request; HTTP/1.1 floods only).
taskset -c "$SUT_CORE" "$TMP/bare_epoll" $FP &
PID[floor]=$!; track "${PID[floor]}"; PORT[floor]=$FP; PORT2[floor]=$FP
wait_port $FP
# nginx's worker is what serves (its master only waits).
sleep 0.3
NGINX_WORKER=$(pgrep -P "${PID[nginx]}" | head -1); [ -n "$NGINX_WORKER" ] && PID[nginx]=$NGINX_WORKER

# The legitimate client: sets L_OK (success %), L_P99 (ms), L_N (requests).
legit() {
  taskset -c "$LOAD_CORE" "$WEIR" bench -R "$LEGIT_RATE" -c 2 -d "${LEGIT_S}s" --timeout 2s --format json \
    "http://127.0.0.1:$1/hello" > "$TMP/legit.json" 2>/dev/null || true
  read -r L_N L_OK L_P99 < <(python3 - "$TMP/legit.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))[0]
except Exception:
    print("0 0 n/a"); sys.exit()
ok = r["statuses"].get("200", 0)
n = r["requests"] + sum(r["errors"].values())
print(n, "%.1f" % (100.0 * ok / n if n else 0), "%.2f" % r["latency_ms"]["p99"])
PY
)
}

# Starts the attack `$1` against system `$2` for ATTACK seconds in the background.
attack() {
  local kind=$1 name=$2 i
  ATTACKERS=()
  case "$kind" in
    conn|keepalive)
      chrt --idle 0 taskset -c "$LOAD_CORE" "$TMP/flood" "$kind" 127.0.0.1 "${PORT[$name]}" "$FLOOD_CONNS" "$ATTACK" 8 > "$TMP/attack.out" &
      ATTACKERS+=($!) ;;
    h2reset)
      chrt --idle 0 taskset -c "$LOAD_CORE" "$TMP/flood" h2reset 127.0.0.1 "${PORT2[$name]}" 16 "$ATTACK" 8 > "$TMP/attack.out" &
      ATTACKERS+=($!) ;;
    slowloris|slowpost)
      local mode=-H; [ "$kind" = slowpost ] && mode=-B
      : > "$TMP/attack.out"
      for i in 2 3 4 5; do
        BIND_SRC=127.0.0.$i LD_PRELOAD="$TMP/bindsrc.so" chrt --idle 0 taskset -c "$LOAD_CORE" \
          slowhttptest $mode -c 1000 -r 400 -i 2 -x 10 -l "$ATTACK" -p 3 -u "http://127.0.0.1:${PORT[$name]}/hello" \
          > "$TMP/slow.$i.out" 2>&1 &
        ATTACKERS+=($!)
      done ;;
  esac
}

unblock_all() {
  local i
  for i in 2 3 4 5 6 7 8 9; do curl -s -X POST "http://127.0.0.1:$ADM/shield/unblock?client=127.0.0.$i" >/dev/null || true; done
}

OUT="$ROOT/bench/results/ddos-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# Under attack: weir (shield) vs weir without it vs nginx vs HAProxy"
  echo
  machine_info
  echo "- haproxy: $(haproxy -v | head -1 | awk '{print $3}'), slowhttptest: $(slowhttptest -h 2>&1 | awk '/version/ {print $NF; exit}')"
  echo "- command: \`bench/ddos.sh ${1:-}\`; legitimate client: \`weir bench -R $LEGIT_RATE -c 2 -d ${LEGIT_S}s\` from 127.0.0.1, started 1 s into each ${ATTACK} s attack"
  echo "- attackers: bench/tools/flood.c ($FLOOD_CONNS connections from 127.0.0.2-9; h2reset: 16 connections, 16 reset streams per write), slowhttptest -c 1000 -r 400 -i 2 from 127.0.0.2-5 each"
  echo "- limits, the same everywhere: 50 connections and 100 r/s (burst 20) per client; weir also blocks a violator for 10 s (closing its new connections in the accept loop)"
  echo
  echo "| attack | system | legit success | legit p99 ms | attack tool: attempts / served 2xx / 429 / refused | server CPU µs per rejected | server core busy | RSS MiB |"
  echo "|---|---|---:|---:|---|---:|---:|---:|"
} > "$OUT"
for kind in none conn keepalive slowloris slowpost h2reset; do
  for name in floor weir-open weir nginx haproxy; do
    [[ "$name" == floor && "$kind" != none && "$kind" != conn && "$kind" != keepalive ]] && continue
    pid=${PID[$name]}
    [ "$name" = weir ] && unblock_all
    t0=$(cpu_ticks "$pid"); s0=$(core_ticks "$SUT_CORE")
    if [ "$kind" != none ]; then attack "$kind" "$name"; sleep 1; fi
    legit "${PORT[$name]}"
    if [ "$kind" != none ]; then
      rss=$(rss_kib "$pid")
      for a in "${ATTACKERS[@]}"; do wait "$a" 2>/dev/null || true; done
    else
      rss=$(rss_kib "$pid")
    fi
    t1=$(cpu_ticks "$pid"); s1=$(core_ticks "$SUT_CORE")
    busy=$(busy_pct "$s0" "$s1")
    line="-"; per="-"
    if [[ "$kind" == conn || "$kind" == keepalive || "$kind" == h2reset ]]; then
      read -r att ok r429 refused < <(awk '{for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                                          print v["attempts"], v["ok"], v["r429"], v["refused"] }' "$TMP/attack.out")
      line="$att / $ok / $r429 / $refused"
      rejected=$((r429 + refused))
      [ "$kind" = h2reset ] && rejected=$att
      # Nothing rejected (floor, weir-open): the cost per attack connection or request served.
      [ "$rejected" -eq 0 ] && rejected=$att
      per=$(awk -v d=$((t1 - t0)) -v r="$rejected" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", d * 1e6 / hz / r; else print "n/a" }')
    elif [ "$kind" != none ]; then
      held=0; closed=0
      for i in 2 3 4 5; do
        read -r h c < <(sed 's/\x1b\[[0-9;]*m//g' "$TMP/slow.$i.out" |
          awk '/^connected:/ {h = $2} /^closed:/ {c = $2} END {print h + 0, c + 0}')
        held=$((held + h)); closed=$((closed + c))
      done
      line="4 × slowhttptest: $held open at the end, $closed closed by the server"
    fi
    echo "| $kind | $name | $L_OK% of $L_N | $L_P99 | $line | $per | $busy% | $((rss / 1024)) |" >> "$OUT"
    log "$kind $name: legit $L_OK% p99 $L_P99 ms; attack $line; CPU/rejected $per us; busy $busy%; rss $((rss / 1024)) MiB"
    sleep 1
  done
done
{
  echo
  echo "\"CPU µs per rejected\": the server's CPU time over the whole attack divided by the connections"
  echo "(conn flood) or requests (keep-alive flood) the attack tool saw refused or answered 429, or by"
  echo "the streams it opened and reset (h2reset); for the floor (bench/tools/bare_epoll.c: one read"
  echo "and one write per request, no HTTP, no limits) and weir-open nothing is rejected, so the"
  echo "figure is their cost per attack connection or request served. The legitimate client's own"
  echo "requests are in the CPU figure too ($LEGIT_RATE r/s)."
  echo
  echo "weir's shield counters after the run:"
  echo
  echo '```'
  curl -s "http://127.0.0.1:$ADM/metrics" | grep -E '^weir_shield_(actions_total\{.*\} [1-9]|clients |blocked)' || true
  echo '```'
} >> "$OUT"
log "results in $OUT"
cat "$OUT"
