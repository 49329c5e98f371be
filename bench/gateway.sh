#!/usr/bin/env bash
# The gateway's filters (issue 19): seed 003's gateway, `/bare` and `/filtered` proxied round-robin
# to a pool of two origins, where `/filtered` runs a rate limit and an IP allow list (weir's
# `/breaker` adds a circuit breaker, counted in instructions only). Each server does the same in
# the same run, one worker pinned to core 0:
#   weir     filters: rate_limit ($remote_addr), ip allow (+ circuit_breaker on /breaker)
#   nginx    limit_req (zone by $binary_remote_addr) + allow/deny
#   HAProxy  stick table tracking the source's http_req_rate + an ACL on src
# The limits are set far above the offered load (nothing is refused): this measures what the
# accounting costs per request, not what refusing saves. Origins (one nginx worker answering
# 1 KiB on two ports) and wrk share core 1. Each route is run REPS times, alternating bare and
# filtered, wrk -t1 -c100; the median of each is reported with the server's CPU µs per request,
# and the filters' added cost is filtered − bare. The floor row is bench/tools/bare_relay.c.
# Wall-clock CPU per request on this shared machine moves ±15% between runs, more than the
# filters cost; so each server is also run under callgrind (user-space instructions per request,
# 5,000 keep-alive requests after 500 of warm-up, bare and filtered): a deterministic figure of
# the same added cost, for nginx and HAProxy too (one process, no master).
# Usage: bench/gateway.sh [--quick]   (results in bench/results/gateway-<date>.md)
source "$(dirname "$0")/lib.sh"

REPS=3; WRK_D=6s
[ "${1:-}" = "--quick" ] && { REPS=1; WRK_D=3s; }

ensure_pkgs nginx-light haproxy wrk gcc libc6-dev
build_weir
gcc -O2 -o "$TMP/bare_relay" "$BENCH_DIR/tools/bare_relay.c"
raise_nofile

O1=19101; O2=19102
P_WEIR=18280; P_NGINX=18281; P_HAPROXY=18282; P_FLOOR=18283
BODY1K=$(head -c 1024 /dev/zero | tr '\0' 'x')
RATE=1000000

nginx_conf "$TMP/origin" <<NGX
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$O1 reuseport backlog=4096;
    listen 127.0.0.1:$O2 reuseport backlog=4096;
    location / { default_type text/plain; return 200 "$BODY1K"; }
  }
NGX
start_nginx "$TMP/origin" "$LOAD_CORE"

cat > "$TMP/weir.yaml" <<YAML
workers: 1
upstreams:
  echo:
    servers: ["127.0.0.1:$O1", "127.0.0.1:$O2"]
    policy: round_robin
    keepalive: { max_idle: 1024 }
  shadow:
    servers: ["127.0.0.1:$O2"]
filters:
  copy: { mirror: { upstream: shadow, max_in_flight: 1024 } }
  limit: { rate_limit: { rate: $RATE, burst: 1000, headers: false } }
  office: { ip: { allow: [127.0.0.0/8] } }
  breaker: { circuit_breaker: {} }
  a1: { ip: { allow: [127.0.0.0/8] } }
  a2: { ip: { allow: [127.0.0.0/8] } }
  a3: { ip: { allow: [127.0.0.0/8] } }
listeners:
  - address: 127.0.0.1:$P_WEIR
    routes:
      - match: { path: /bare }
        proxy: { upstream: echo }
      - match: { path: /filtered }
        filters: [office, limit]
        proxy: { upstream: echo }
      - match: { path: /breaker }
        filters: [office, limit, breaker]
        proxy: { upstream: echo }
      - match: { path: /threeip }
        filters: [a1, a2, a3]
        proxy: { upstream: echo }
      - match: { path: /mirrored }
        filters: [copy]
        proxy: { upstream: echo }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 1000000;
  limit_req_zone \$binary_remote_addr zone=per_client:10m rate=${RATE}r/s;
  upstream echo { server 127.0.0.1:$O1; server 127.0.0.1:$O2; keepalive 1024; }
  server {
    listen 127.0.0.1:$P_NGINX reuseport backlog=4096;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location = /bare { proxy_pass http://echo; }
    location = /filtered {
      allow 127.0.0.0/8;
      deny all;
      limit_req zone=per_client burst=1000 nodelay;
      proxy_pass http://echo;
    }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED

haproxy_conf "$TMP/haproxy.cfg" <<HAP
frontend fe
  bind 127.0.0.1:$P_HAPROXY
  stick-table type ip size 100k expire 30s store http_req_rate(1s)
  acl filtered path /filtered
  http-request deny deny_status 403 if filtered !{ src 127.0.0.0/8 }
  http-request track-sc0 src if filtered
  http-request deny deny_status 429 if filtered { sc_http_req_rate(0) gt $RATE }
  default_backend echo
backend echo
  balance roundrobin
  server s1 127.0.0.1:$O1
  server s2 127.0.0.1:$O2
HAP
taskset -c "$SUT_CORE" haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.log" &
HAPROXY_PID=$!; track $HAPROXY_PID

taskset -c "$SUT_CORE" "$TMP/bare_relay" $P_FLOOR $O1 &
FLOOR_PID=$!; track $FLOOR_PID

wait_port $O1 "$TMP/origin/error.log"; wait_port $P_WEIR "$TMP/weir.log"
wait_port $P_NGINX "$TMP/nginx/error.log"; wait_port $P_HAPROXY "$TMP/haproxy.log"
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)

for p in $P_WEIR $P_NGINX $P_HAPROXY; do
  for path in bare filtered; do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/$path")
    [ "$code" = 200 ] || { log "port $p /$path answered $code"; exit 1; }
  done
done

SYSTEMS=("weir $WEIR_PID $P_WEIR" "nginx $NGINX_PID $P_NGINX" "haproxy $HAPROXY_PID $P_HAPROXY")
declare -A CPU RPSS P99S ERRS
for s in "${SYSTEMS[@]}"; do
  read -r name pid port <<<"$s"
  taskset -c "$LOAD_CORE" wrk -t1 -c100 -d2s "http://127.0.0.1:$port/bare" >/dev/null 2>&1
  taskset -c "$LOAD_CORE" wrk -t1 -c100 -d2s "http://127.0.0.1:$port/filtered" >/dev/null 2>&1
  for rep in $(seq 1 "$REPS"); do
    for path in bare filtered; do
      run_wrk "$pid" "http://127.0.0.1:$port/$path" -t1 -c100 -d"$WRK_D"
      k="$name/$path"
      CPU[$k]="${CPU[$k]:-} $CPU_US_PER_REQ"; RPSS[$k]="${RPSS[$k]:-} $RPS"
      P99S[$k]="${P99S[$k]:-} $P99_US"; ERRS[$k]="${ERRS[$k]:-}$ERRORS;"
      log "$name /$path rep $rep: $RPS r/s, p99 $P99_US µs, $CPU_US_PER_REQ CPU µs/req, errors $ERRORS"
    done
  done
done
# Mirroring on: every request also copied to the shadow origin; the real request's p99 is
# what must not move.
for rep in $(seq 1 "$REPS"); do
  for path in bare mirrored; do
    run_wrk "$WEIR_PID" "http://127.0.0.1:$P_WEIR/$path" -t1 -c100 -d"$WRK_D"
    k="mirror/$path"
    CPU[$k]="${CPU[$k]:-} $CPU_US_PER_REQ"; RPSS[$k]="${RPSS[$k]:-} $RPS"; P99S[$k]="${P99S[$k]:-} $P99_US"
    log "weir /$path rep $rep: $RPS r/s, p99 $P99_US µs, $CPU_US_PER_REQ CPU µs/req"
  done
done
run_wrk "$FLOOR_PID" "http://127.0.0.1:$P_FLOOR/bare" -t1 -c100 -d"$WRK_D"
FLOOR_ROW="| floor (bare_relay) | — | $RPS | $P99_US | $CPU_US_PER_REQ | — | $ERRORS |"

# Instructions per request of a server under callgrind: sets INS. Usage: cg_server port path cmd...
CG_N=5000
cg_server() {
  local port=$1 path=$2 pid out; shift 2
  taskset -c "$SUT_CORE" valgrind --tool=callgrind --callgrind-out-file="$TMP/cgs.out.%p" "$@" >/dev/null 2>"$TMP/cgs.log" &
  pid=$!; track $pid
  for _ in $(seq 1 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  taskset -c "$LOAD_CORE" "$WEIR" bench -n 500 -c 10 "http://127.0.0.1:$port$path" >/dev/null 2>&1 || true
  callgrind_control -z "$pid" >/dev/null 2>&1
  taskset -c "$LOAD_CORE" "$WEIR" bench -n "$CG_N" -c 10 "http://127.0.0.1:$port$path" >/dev/null 2>&1 || true
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 0.5
  out=$(ls -t "$TMP"/cgs.out."$pid"* 2>/dev/null | head -1)
  INS=$(awk -v n="$CG_N" '/^(summary|totals):/ {t=$2} END { if (t > 0) printf "%.0f", t / n; else print "n/a" }' "$out")
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  rm -f "$TMP"/cgs.out.*
}
ensure_pkgs valgrind
kill "$WEIR_PID" "$HAPROXY_PID" 2>/dev/null; kill "$NGINX_MASTER" 2>/dev/null; sleep 0.5
sed -i "s/^daemon off;/daemon off;\nmaster_process off;/" "$TMP/nginx/nginx.conf"
declare -A INSN
for path in bare filtered; do
  cg_server $P_WEIR /$path "$WEIR" run -c "$TMP/weir.yaml"; INSN[weir/$path]=$INS
  cg_server $P_NGINX /$path nginx -c "$TMP/nginx/nginx.conf"; INSN[nginx/$path]=$INS
  cg_server $P_HAPROXY /$path haproxy -db -f "$TMP/haproxy.cfg"; INSN[haproxy/$path]=$INS
  log "instructions /$path: weir ${INSN[weir/$path]}, nginx ${INSN[nginx/$path]}, haproxy ${INSN[haproxy/$path]}"
done
cg_server $P_WEIR /breaker "$WEIR" run -c "$TMP/weir.yaml"; INSN[weir/breaker]=$INS
# The seam's own cost: three synchronous filters that do almost nothing (an IPv4 mask test each).
cg_server $P_WEIR /threeip "$WEIR" run -c "$TMP/weir.yaml"; INSN[weir/threeip]=$INS

med() { median $1; }
OUT="$ROOT/bench/results/gateway-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# gateway filters — rate limit + IP allow (+ circuit breaker): weir vs nginx vs HAProxy"
  echo
  machine_info
  echo "- haproxy: $(haproxy -v 2>&1 | head -1 | awk '{print $3}')"
  echo "- command: \`bench/gateway.sh ${1:-}\`; wrk -t1 -c100 -d$WRK_D, median of $REPS runs per route, alternating bare and filtered"
  echo "- weir: rate_limit (GCRA, \$remote_addr, headers off) + ip allow; nginx: limit_req + allow/deny; HAProxy: stick table http_req_rate(1s) + src ACL"
  echo "- limits far above the load (rate $RATE/s): nothing refused; the cost of accounting"
  echo
  echo "| server | route | requests/s | p99 µs | CPU µs/req | filters' added CPU µs/req | errors |"
  echo "|---|---|---:|---:|---:|---:|---|"
  for s in "${SYSTEMS[@]}"; do
    read -r name _ _ <<<"$s"
    b=$(med "${CPU[$name/bare]}"); f=$(med "${CPU[$name/filtered]}")
    echo "| $name | /bare | $(med "${RPSS[$name/bare]}") | $(med "${P99S[$name/bare]}") | $b | — | ${ERRS[$name/bare]} |"
    echo "| $name | /filtered | $(med "${RPSS[$name/filtered]}") | $(med "${P99S[$name/filtered]}") | $f | $(awk -v a="$f" -v b="$b" 'BEGIN { printf "%.2f", a - b }') | ${ERRS[$name/filtered]} |"
  done
  echo "$FLOOR_ROW"
  echo
  wb=$(med "${CPU[weir/bare]}"); wf=$(med "${CPU[weir/filtered]}")
  nb=$(med "${CPU[nginx/bare]}"); nf=$(med "${CPU[nginx/filtered]}")
  echo
  echo "User-space instructions per request (callgrind, $CG_N keep-alive requests, weir bench -c 10):"
  echo
  echo "| server | /bare | /filtered | filters' added instructions |"
  echo "|---|---:|---:|---:|"
  for name in weir nginx haproxy; do
    echo "| $name | ${INSN[$name/bare]} | ${INSN[$name/filtered]} | $(awk -v a="${INSN[$name/filtered]}" -v b="${INSN[$name/bare]}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) print a - b; else print "n/a" }') |"
  done
  echo
  echo "weir with a circuit breaker on the route too (/breaker): ${INSN[weir/breaker]} instructions per request"
  echo
  echo "weir with three synchronous filters that do almost nothing (three ip allow lists, /threeip): ${INSN[weir/threeip]} instructions per request, $(awk -v a="${INSN[weir/threeip]}" -v b="${INSN[weir/bare]}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) print a - b; else print "n/a" }') over /bare (target: ~300)"
  echo
  echo "weir with every request mirrored to a shadow origin (the copy on its own task), same run:"
  echo
  echo "| weir route | requests/s | p99 µs | CPU µs/req |"
  echo "|---|---:|---:|---:|"
  for path in bare mirrored; do
    echo "| /$path | $(med "${RPSS[mirror/$path]}") | $(med "${P99S[mirror/$path]}") | $(med "${CPU[mirror/$path]}") |"
  done
  echo
  echo "- weir filtered / nginx filtered (CPU per request): $(ratio "$wf" "$nf") (target ≤ 0.80)"
  echo "- weir filtered / nginx filtered (instructions): $(ratio "${INSN[weir/filtered]}" "${INSN[nginx/filtered]}"); added instructions, weir / nginx: $(awk -v a="${INSN[weir/filtered]}" -v b="${INSN[weir/bare]}" -v c="${INSN[nginx/filtered]}" -v d="${INSN[nginx/bare]}" 'BEGIN { if (c - d > 0) printf "%.2f", (a - b) / (c - d); else print "n/a" }')"
  echo "- weir's added cost / nginx's added cost: $(awk -v a="$wf" -v b="$wb" -v c="$nf" -v d="$nb" 'BEGIN { x = a - b; y = c - d; if (y > 0) printf "%.2f (%.2f vs %.2f µs)", x / y, x, y; else printf "n/a (%.2f vs %.2f µs)", x, y }') (target ≤ 1)"
} > "$OUT"
cat "$OUT"
log "results written to ${OUT#$ROOT/}"
