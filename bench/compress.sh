#!/usr/bin/env bash
# Compression that knows the cache (issue 20), pinned: weir one worker on core 0, origin and
# load on core 1.
#  1. Hits of a 16 KiB text object on a cached, compressing route: identity vs the stored br,
#     gzip and zstd variants (the issue: a compressed hit within 5% of an identity hit), and
#     an identity hit on the same object without the filter. CPU µs/req from wrk, and
#     user-space instructions per request under callgrind (deterministic).
#  2. Compressing misses: every response compressed as it streams (a route without a cache),
#     weir gzip level 6 vs nginx `gzip on; gzip_comp_level 6` proxying the same origin, and
#     weir br 5 and zstd 3 beside them; each server's identity proxy in the same run gives the
#     compression's own cost. The floor is bench/tools/bare_relay.c.
#  3. What serving identity by decoding a stored gzip body on the fly would cost per hit
#     (zlib, python3), against storing identity (what weir does: 0 per hit).
#  4. Basic auth: a request whose bcrypt (cost 10) verification is remembered vs one checked
#     every time (cache: 0), instructions per request.
# Usage: bench/compress.sh [--quick]   (results in bench/results/compress-<date>.md)
source "$(dirname "$0")/lib.sh"

WRK_D=5s; REPS=3
[ "${1:-}" = "--quick" ] && { WRK_D=3s; REPS=1; }

ensure_pkgs nginx-light wrk gcc libc6-dev valgrind apache2-utils
build_weir
gcc -O2 -o "$TMP/bare_relay" "$BENCH_DIR/tools/bare_relay.c"
raise_nofile

O=19201; P_WEIR=18290; P_NGINX=18291; P_FLOOR=18292
mkdir -p "$TMP/www"
python3 - "$TMP/www/page.html" <<'PY'
import sys
lines = [f"<tr><td>row {i}</td><td>value {i * 7919 % 10007}</td><td>some text to compress</td></tr>\n" for i in range(400)]
body = ("<html><body><table>\n" + "".join(lines))[:16 * 1024 - 24] + "</table></body></html>\n"
open(sys.argv[1], "w").write(body[:16 * 1024])
PY
chmod 755 "$TMP" "$TMP/www"; chmod 644 "$TMP/www/page.html"   # nginx's worker is not root
log "page: $(stat -c %s "$TMP/www/page.html") bytes"

nginx_conf "$TMP/origin" <<NGX
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$O reuseport backlog=4096;
    root $TMP/www;
    location / { default_type text/html; add_header Cache-Control "max-age=3600"; }
  }
NGX
start_nginx "$TMP/origin" "$LOAD_CORE"

htpasswd -nbB -C 10 demo demo > "$TMP/htpasswd"
cat > "$TMP/weir.yaml" <<YAML
workers: 1
cache_zones: { z: { max_size: 64m } }
upstreams:
  origin: { servers: ["127.0.0.1:$O"], keepalive: { max_idle: 256 } }
filters:
  squeeze: { compress: { gzip_level: 6, br_level: 5, zstd_level: 3 } }
listeners:
  - address: 127.0.0.1:$P_WEIR
    routes:
      - match: { path_prefix: /cached/ }
        filters: [squeeze]
        proxy: { upstream: origin, strip_prefix: /cached }
        cache: { zone: z }
      - match: { path_prefix: /plain/ }
        proxy: { upstream: origin, strip_prefix: /plain }
        cache: { zone: z }
      - match: { path_prefix: /stream/ }
        filters: [squeeze]
        proxy: { upstream: origin, strip_prefix: /stream }
      - match: { path_prefix: /relay/ }
        proxy: { upstream: origin, strip_prefix: /relay }
      - match: { path: /basic }
        filters: [{ basic_auth: { file: "$TMP/htpasswd" } }]
        respond: { body: ok }
      - match: { path: /basic-nocache }
        filters: [{ basic_auth: { file: "$TMP/htpasswd", cache: 0s } }]
        respond: { body: ok }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 1000000;
  upstream origin { server 127.0.0.1:$O; keepalive 256; }
  server {
    listen 127.0.0.1:$P_NGINX reuseport backlog=4096;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /stream/ { gzip on; gzip_comp_level 6; gzip_types text/html; gzip_min_length 256; proxy_pass http://origin/; }
    location /relay/ { gzip off; proxy_pass http://origin/; }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED

taskset -c "$SUT_CORE" "$TMP/bare_relay" $P_FLOOR $O &
FLOOR_PID=$!; track $FLOOR_PID

wait_port $O "$TMP/origin/error.log"; wait_port $P_WEIR "$TMP/weir.log"; wait_port $P_NGINX "$TMP/nginx/error.log"
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)

# Fill the cache: the identity object, then each coding's variant.
for ae in identity br gzip zstd; do
  curl -s -o /dev/null -H "Accept-Encoding: $ae" "http://127.0.0.1:$P_WEIR/cached/page.html"
  curl -s -o /dev/null -H "Accept-Encoding: $ae" "http://127.0.0.1:$P_WEIR/cached/page.html"
done
curl -s -o /dev/null "http://127.0.0.1:$P_WEIR/plain/page.html"
for ae in br gzip zstd; do
  got=$(curl -s -D - -o /dev/null -H "Accept-Encoding: $ae" "http://127.0.0.1:$P_WEIR/cached/page.html" | tr -d '\r' | awk -F': ' 'tolower($1) == "content-encoding" { print $2 }')
  [ "$got" = "$ae" ] || { log "cached $ae answered Content-Encoding '$got'"; curl -s -D - -o /dev/null -H "Accept-Encoding: $ae" "http://127.0.0.1:$P_WEIR/cached/page.html" >&2; curl -s -D - -o /dev/null "http://127.0.0.1:$O/page.html" >&2; exit 1; }
done
got=$(curl -s -D - -o /dev/null -H "Accept-Encoding: gzip" "http://127.0.0.1:$P_NGINX/stream/page.html" | tr -d '\r' | awk -F': ' 'tolower($1) == "content-encoding" { print $2 }')
[ "$got" = gzip ] || { log "nginx did not gzip ($got)"; exit 1; }

declare -A CPU RPSS P99S BYTES
measure() { # key pid url [wrk args...]
  local key=$1 pid=$2 url=$3; shift 3
  run_wrk "$pid" "$url" -t1 -c50 -d"$WRK_D" "$@"
  CPU[$key]="${CPU[$key]:-} $CPU_US_PER_REQ"; RPSS[$key]="${RPSS[$key]:-} $RPS"; P99S[$key]="${P99S[$key]:-} $P99_US"
  log "$key: $RPS r/s, p99 $P99_US µs, $CPU_US_PER_REQ CPU µs/req, errors $ERRORS"
}
size_of() { curl -s -H "Accept-Encoding: $2" "$1" | wc -c; }

for rep in $(seq 1 "$REPS"); do
  measure "hit/identity" $WEIR_PID "http://127.0.0.1:$P_WEIR/cached/page.html"
  for ae in br gzip zstd; do
    measure "hit/$ae" $WEIR_PID "http://127.0.0.1:$P_WEIR/cached/page.html" -H "Accept-Encoding: $ae"
  done
  measure "hit/no-filter" $WEIR_PID "http://127.0.0.1:$P_WEIR/plain/page.html"
  measure "weir/relay" $WEIR_PID "http://127.0.0.1:$P_WEIR/relay/page.html"
  measure "weir/gzip" $WEIR_PID "http://127.0.0.1:$P_WEIR/stream/page.html" -H "Accept-Encoding: gzip"
  measure "weir/br" $WEIR_PID "http://127.0.0.1:$P_WEIR/stream/page.html" -H "Accept-Encoding: br"
  measure "weir/zstd" $WEIR_PID "http://127.0.0.1:$P_WEIR/stream/page.html" -H "Accept-Encoding: zstd"
  measure "nginx/relay" $NGINX_PID "http://127.0.0.1:$P_NGINX/relay/page.html"
  measure "nginx/gzip" $NGINX_PID "http://127.0.0.1:$P_NGINX/stream/page.html" -H "Accept-Encoding: gzip"
  measure "floor" $FLOOR_PID "http://127.0.0.1:$P_FLOOR/page.html"
done
for ae in identity br gzip zstd; do BYTES[hit/$ae]=$(size_of "http://127.0.0.1:$P_WEIR/cached/page.html" $ae); done
BYTES[nginx/gzip]=$(size_of "http://127.0.0.1:$P_NGINX/stream/page.html" gzip)

# Instructions per request under callgrind (weir alone; 500 warm-up requests, then CG_N).
CG_N=5000
kill "$WEIR_PID" 2>/dev/null; wait "$WEIR_PID" 2>/dev/null || true
taskset -c "$SUT_CORE" valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out.%p" "$WEIR" run -c "$TMP/weir.yaml" >/dev/null 2>"$TMP/cg.log" &
CG_PID=$!; track $CG_PID
wait_port $P_WEIR "$TMP/cg.log"
declare -A INSN
cg_run() { # key path [header]
  local key=$1 path=$2 hdr=${3:-}
  local args=(-n 500 -c 10); [ -n "$hdr" ] && args+=(-H "$hdr")
  taskset -c "$LOAD_CORE" "$WEIR" bench "${args[@]}" "http://127.0.0.1:$P_WEIR$path" >/dev/null 2>&1 || true
  callgrind_control -z "$CG_PID" >/dev/null 2>&1
  args=(-n "$CG_N" -c 10); [ -n "$hdr" ] && args+=(-H "$hdr")
  taskset -c "$LOAD_CORE" "$WEIR" bench "${args[@]}" "http://127.0.0.1:$P_WEIR$path" >/dev/null 2>&1 || true
  callgrind_control -d "$CG_PID" >/dev/null 2>&1; sleep 0.5
  local out; out=$(ls -t "$TMP"/cg.out."$CG_PID"* | head -1)
  INSN[$key]=$(awk -v n="$CG_N" '/^(summary|totals):/ {t=$2} END { printf "%.0f", t / n }' "$out")
  rm -f "$TMP"/cg.out."$CG_PID".*
  log "instructions $key: ${INSN[$key]}"
}
cg_run hit/identity /cached/page.html
cg_run hit/br /cached/page.html "Accept-Encoding: br"
cg_run hit/gzip /cached/page.html "Accept-Encoding: gzip"
cg_run hit/zstd /cached/page.html "Accept-Encoding: zstd"
cg_run hit/no-filter /plain/page.html
cg_run basic/remembered /basic "Authorization: Basic ZGVtbzpkZW1v"
CG_N=50 cg_run basic/bcrypt /basic-nocache "Authorization: Basic ZGVtbzpkZW1v"
cg_run basic/none /basic-none-such
kill "$CG_PID" 2>/dev/null; wait "$CG_PID" 2>/dev/null || true

DECODE_US=$(python3 - "$TMP/www/page.html" <<'PY'
import sys, time, zlib
data = open(sys.argv[1], "rb").read()
c = zlib.compressobj(6, zlib.DEFLATED, 31); gz = c.compress(data) + c.flush()
n = 20000; t = time.perf_counter()
for _ in range(n): zlib.decompress(gz, 47)
print(f"{(time.perf_counter() - t) / n * 1e6:.1f}")
PY
)

med() { median $1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
OUT="$ROOT/bench/results/compress-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# compression that knows the cache — weir vs nginx gzip"
  echo
  machine_info
  echo "- command: \`bench/compress.sh ${1:-}\`; wrk -t1 -c50 -d$WRK_D, median of $REPS runs"
  echo "- object: a 16 KiB HTML page from an nginx origin on core 1; weir gzip 6, br 5, zstd 3; nginx gzip_comp_level 6"
  echo
  echo "## Cache hits of the stored 16 KiB object (weir, route with compress + cache)"
  echo
  echo "| request | bytes sent (body) | requests/s | p99 µs | CPU µs/req | instructions/req |"
  echo "|---|---:|---:|---:|---:|---:|"
  for k in hit/identity hit/br hit/gzip hit/zstd hit/no-filter; do
    echo "| $k | ${BYTES[$k]:-16384} | $(med "${RPSS[$k]}") | $(med "${P99S[$k]}") | $(med "${CPU[$k]}") | ${INSN[$k]} |"
  done
  echo
  for ae in br gzip zstd; do
    echo "- $ae hit / identity hit, instructions: $(ratio "${INSN[hit/$ae]}" "${INSN[hit/identity]}"); CPU: $(ratio "$(med "${CPU[hit/$ae]}")" "$(med "${CPU[hit/identity]}")") (target ≤ 1.05)"
  done
  echo "- identity hit with the filter / without it, instructions: $(ratio "${INSN[hit/identity]}" "${INSN[hit/no-filter]}")"
  echo
  echo "## Compressing every response as it streams (no cache): weir vs nginx"
  echo
  echo "| server | request | requests/s | p99 µs | CPU µs/req | compression's CPU µs/req |"
  echo "|---|---|---:|---:|---:|---:|"
  wr=$(med "${CPU[weir/relay]}"); nr=$(med "${CPU[nginx/relay]}")
  echo "| weir | identity relay | $(med "${RPSS[weir/relay]}") | $(med "${P99S[weir/relay]}") | $wr | — |"
  for c in gzip br zstd; do
    v=$(med "${CPU[weir/$c]}")
    echo "| weir | $c | $(med "${RPSS[weir/$c]}") | $(med "${P99S[weir/$c]}") | $v | $(awk -v a="$v" -v b="$wr" 'BEGIN { printf "%.2f", a - b }') |"
  done
  echo "| nginx | identity relay | $(med "${RPSS[nginx/relay]}") | $(med "${P99S[nginx/relay]}") | $nr | — |"
  ng=$(med "${CPU[nginx/gzip]}")
  echo "| nginx | gzip (${BYTES[nginx/gzip]} B) | $(med "${RPSS[nginx/gzip]}") | $(med "${P99S[nginx/gzip]}") | $ng | $(awk -v a="$ng" -v b="$nr" 'BEGIN { printf "%.2f", a - b }') |"
  echo "| floor (bare_relay) | — | $(med "${RPSS[floor]}") | $(med "${P99S[floor]}") | $(med "${CPU[floor]}") | — |"
  echo
  echo "- weir gzip / nginx gzip, CPU per compressed response: $(ratio "$(med "${CPU[weir/gzip]}")" "$ng") (target ≤ 1)"
  echo
  echo "## Identity for clients that accept no coding"
  echo
  echo "- stored identity (weir): the identity hit above; decoding a stored gzip body on the fly instead: ${DECODE_US} µs per 16 KiB hit (zlib in python3, this machine), more than a whole identity hit costs"
  echo
  echo "## Basic auth (instructions per request, a respond route)"
  echo
  echo "| request | instructions/req |"
  echo "|---|---:|"
  echo "| no credentials (401), /basic-none-such is a 404 route: the floor of a small answer | ${INSN[basic/none]} |"
  echo "| demo:demo, verification remembered (cache: 5m) | ${INSN[basic/remembered]} |"
  echo "| demo:demo, bcrypt cost 10 every request (cache: 0s) | ${INSN[basic/bcrypt]} |"
} > "$OUT"
cat "$OUT"
log "results: $OUT"
