#!/usr/bin/env bash
# A/B of two weir builds in the same run, for hot-path changes: the scenarios of bench/core.sh
# (hello keep-alive at -c100 and -c1000, Connection: close at -c200) and of
# bench/seed000_cache.sh (cache hits of 12 B and 1 KiB at -c100 and -c1000), and instruction
# counts for those plus a proxied 1 KiB response (examples/proxy.yaml). Each binary runs
# one worker on core 0, wrk -t1 on core 1; every cell is measured ROUNDS times with the order of
# the two binaries alternated, and the medians are reported with the new/old ratio.
# Besides CPU µs per request (user+sys from /proc/PID/stat), it reports user-space instructions
# per request, counted by callgrind over a fixed number of requests (`weir bench -n`) after a
# warm-up: instruction counts do not move with the machine's noise the way time does. (perf's
# hardware counters are not available on this VM.)
# The h2-tls-hit-1KiB row loads a TLS listener with h2load -c 100 -m 10 (a 1 KiB hit), the
# h1-tls-hit-1KiB row the same with HTTP/1.1 (h2load --h1 -c 100): their counts include the 100
# handshakes of the measured run, spread over its requests.
# CG_ONLY=1 skips the timed cells (instruction counts only, about a minute).
# Usage: bench/ab_weir.sh OLD_REV [--quick]   (OLD_REV: a git revision, built in a worktree)
#        OLD_WEIR=/path/to/weir bench/ab_weir.sh [--quick]
source "$(dirname "$0")/lib.sh"
DUR=5s; ROUNDS=3
OLD_REV=""
for a in "$@"; do
  case "$a" in
    --quick) DUR=3s; ROUNDS=1 ;;
    *) OLD_REV=$a ;;
  esac
done
ensure_pkgs nginx-light wrk valgrind curl nghttp2-client openssl strace
build_weir
NEW_WEIR=$WEIR
if [ -z "${OLD_WEIR:-}" ]; then
  [ -n "$OLD_REV" ] || { log "usage: bench/ab_weir.sh OLD_REV [--quick] (or OLD_WEIR=path)"; exit 2; }
  log "building $OLD_REV (release) in a worktree"
  git -C "$ROOT" worktree add -q --detach "$TMP/old" "$OLD_REV"
  (cd "$TMP/old" && CARGO_TARGET_DIR="$TMP/old-target" cargo build --release -q)
  OLD_WEIR="$TMP/old-target/release/weir"
  cp "$OLD_WEIR" "$TMP/weir-old"; OLD_WEIR="$TMP/weir-old"
  git -C "$ROOT" worktree remove --force "$TMP/old"
fi
raise_nofile

# Origin for the cache cells: nginx serving the objects, on the load core.
ORIGIN_PORT=19301
file_origin "$ORIGIN_PORT" 12 1024

declare -A PID PORT ADMIN
PORT[old]=18380; PORT[new]=18381; ADMIN[old]=19380; ADMIN[new]=19381
CPORT_old=18390; CPORT_new=18391
# Starts a weir build on core 0; sets STARTED to its pid.
start_weir() { # which binary config port [admin]
  local which=$1 bin=$2 cfg=$3 port=$4 admin=${5:-127.0.0.1:0}
  WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$port WEIR_ORIGIN=127.0.0.1:$ORIGIN_PORT WEIR_ADMIN=$admin \
    taskset -c "$SUT_CORE" "$bin" run -c "$cfg" >/dev/null 2>"$TMP/weir-$which-$port.log" &
  STARTED=$!
  track $STARTED
}
start_weir old "$OLD_WEIR" "$ROOT/examples/hello.yaml" ${PORT[old]}; PID[old,hello]=$STARTED
start_weir new "$NEW_WEIR" "$ROOT/examples/hello.yaml" ${PORT[new]}; PID[new,hello]=$STARTED
# The hit is measured with the features of later issues not configured (and older builds do not
# know their keys): examples/cache.yaml without its compress filter and its disk tier (the hot
# paths are compared with the new features not configured; older builds do not know `disk`).
sed -e '/^        filters:$/d' -e '/- compress:/d' -e '/^    disk:/d' "$ROOT/examples/cache.yaml" > "$TMP/cache.yaml"
# HTTP/2 (h2c, prior knowledge): the hello routes on an h2c listener, for the h2 row.
sed -e 's/^  - address: \(.*\)$/  - address: \1\n    h2c: true/' -e "s|\${WEIR_ROOT:-www}|$ROOT/examples/www|" \
  "$ROOT/examples/hello.yaml" > "$TMP/hello-h2c.yaml"
# HTTP/2 over TLS (h2load -c 100 -m 10, a 1 KiB hit): the pattern 78d18ae slowed 2x unseen,
# since weir bench --h2 sends its streams in step and never showed it (issue 35 §4).
cache_tls_yaml "$TMP/cache-tls.yaml"
# HTTP/3 (issue 37): the same hit on a QUIC listener, weir bench --h3 -c 10 --streams 10 (a
# build from before HTTP/3 refuses the config: its cell is n/a).
sed 's/^    tls:$/    quic: true\n    tls:/' "$TMP/cache-tls.yaml" > "$TMP/cache-h3.yaml"
# gRPC over an HTTP/2 upstream (issue 55): a 1 KiB unary call on h2c (tests/fixtures/grpc-go's
# echo.Echo/Unary, a StringValue of 1,024 bytes each way), proxied over the HTTP/2 upstream
# path (a bridge until issue 55 §2, weir's own client since) to grpc-go (GOMAXPROCS=1, on the
# load core). grpc-go sends no
# `content-length`: an HTTP/2 answer with one was a 502 until issue 55 (grpc.rs tests it).
GRPC_ORIGIN_PORT=19302
command -v go >/dev/null 2>&1 || export PATH="/usr/local/go/bin:$PATH"
(cd "$ROOT/crates/weir/tests/fixtures/grpc-go" && go build -o "$TMP/grpc-fixture" .)
mkfifo "$TMP/grpc-fixture.in"
(GOMAXPROCS=1 taskset -c "$LOAD_CORE" "$TMP/grpc-fixture" server -addr 127.0.0.1:$GRPC_ORIGIN_PORT \
  <"$TMP/grpc-fixture.in" >"$TMP/grpc-origin.log" 2>&1) &
track $!
exec 8>"$TMP/grpc-fixture.in"   # held open: the fixture exits when its stdin closes
cat > "$TMP/grpc-h2.yaml" <<'YAML'
workers: ${WEIR_WORKERS:-auto}
upstreams:
  o: { servers: ["${WEIR_ORIGIN}"], protocol: h2 }
listeners:
  - address: ${WEIR_LISTEN}
    h2c: true
    routes:
      - proxy: { upstream: o }
YAML
python3 - "$TMP/grpc-call.bin" <<'PY'
import sys
msg = b"\x0a" + bytes([0x80, 0x08]) + b"x" * 1024   # StringValue{value: 1,024 bytes}
open(sys.argv[1], "wb").write(b"\x00" + len(msg).to_bytes(4, "big") + msg)
PY
wait_port $GRPC_ORIGIN_PORT "$TMP/grpc-origin.log"
# Tracing's cost (issue 55 §4): the proxied 1 KiB request with spans exported over OTLP/HTTP to
# a sink on the load core, every request sampled (trace100) and one in a hundred (trace1).
# The exporter thread's instructions are counted with the worker's (callgrind sums threads);
# a build from before OTLP export refuses the config: its cells are n/a.
OTLP_SINK_PORT=19303
taskset -c "$LOAD_CORE" python3 "$ROOT/bench/tools/otlp_sink.py" $OTLP_SINK_PORT 2>"$TMP/otlp-sink.log" &
track $!
for pct in 100 1; do
  sample=1.0; [ "$pct" = 1 ] && sample=0.01
  { cat "$ROOT/examples/proxy.yaml"
    echo "tracing: { sample: $sample, otlp: { endpoint: 'http://127.0.0.1:$OTLP_SINK_PORT', interval: 100ms } }"
  } > "$TMP/proxy-trace$pct.yaml"
done
wait_port $OTLP_SINK_PORT "$TMP/otlp-sink.log"
start_weir old "$OLD_WEIR" "$TMP/cache.yaml" $CPORT_old 127.0.0.1:${ADMIN[old]}; PID[old,cache]=$STARTED
start_weir new "$NEW_WEIR" "$TMP/cache.yaml" $CPORT_new 127.0.0.1:${ADMIN[new]}; PID[new,cache]=$STARTED
for p in ${PORT[old]} ${PORT[new]} $CPORT_old $CPORT_new; do wait_port "$p"; done
for p in $CPORT_old $CPORT_new; do for n in 12 1024; do curl -s -o /dev/null "http://127.0.0.1:$p/s$n"; done; done

# One measurement: sets CPU_US_PER_REQ, RPS, P99_US.
measure() { # pid url wrk-args...
  local pid=$1 url=$2; shift 2
  taskset -c "$LOAD_CORE" wrk -t1 -d1s "$@" "$url" >/dev/null 2>&1 || true
  run_wrk "$pid" "$url" "$@"
}

# User-space instructions per request under callgrind: INS (bench/lib.sh).
instructions() { WEIR=$NEW_WEIR cg_instructions "$@"; }

CELLS=("hello-ka-c100|hello|/hello|-c100"
       "hello-ka-c1000|hello|/hello|-c1000"
       "hello-close-c200|hello|/hello|-c200 CLOSE"
       "hit-12B-c100|cache|/s12|-c100"
       "hit-12B-c1000|cache|/s12|-c1000"
       "hit-1KiB-c100|cache|/s1024|-c100"
       "hit-1KiB-c1000|cache|/s1024|-c1000")
declare -A CPU RPSV P99 IU
[ -n "${CG_ONLY:-}" ] && ROUNDS=0
for ((r = 0; r < ROUNDS; r++)); do
  for cell in "${CELLS[@]}"; do
    IFS='|' read -r name kind path args <<<"$cell"
    order=(old new); [ $((r % 2)) = 1 ] && order=(new old)
    for which in "${order[@]}"; do
      if [ "$kind" = hello ]; then port=${PORT[$which]}; else eval "port=\$CPORT_$which"; fi
      # wrk needs "Name: value" as one argument: CLOSE stands for it in the cell table.
      wrk_args=()
      for a in $args; do
        if [ "$a" = CLOSE ]; then wrk_args+=(-H "Connection: close"); else wrk_args+=("$a"); fi
      done
      measure "${PID[$which,$kind]}" "http://127.0.0.1:$port$path" -t1 -d"$DUR" "${wrk_args[@]}"
      CPU[$name,$which]+="$CPU_US_PER_REQ "; RPSV[$name,$which]+="$RPS "; P99[$name,$which]+="$P99_US "
      log "round $((r + 1)) $name $which: $RPS req/s, $CPU_US_PER_REQ CPU us/req, p99 ${P99_US}us"
    done
  done
done

# Instruction counts, once per binary and kind of request (they barely vary between runs).
for k in "hello-ka|hello|/hello|-c 10" "hello-close|hello|/hello|-c 10 --close" "hit-1KiB|cache|/s1024|-c 10" "proxy-1KiB|proxy|/s1024|-c 10" "hello-h2c|hello-h2c|/hello|-c 10 --h2 --streams 10" "h2-tls-hit-1KiB|cache-tls|/s1024|H2LOAD -c 100 -m 10" "h1-tls-hit-1KiB|cache-tls|/s1024|H2LOAD --h1 -c 100" "h3-hit-1KiB|cache-h3|/s1024|H3 -c 10 --streams 10" "grpc-h2-1KiB|grpc-h2|/echo.Echo/Unary|-c 10 --h2 --streams 10 -m POST -D $TMP/grpc-call.bin -H content-type:application/grpc" "proxy-1KiB-trace100|proxy-trace100|/s1024|-c 10" "proxy-1KiB-trace1|proxy-trace1|/s1024|-c 10"; do
  IFS='|' read -r name kind path args <<<"$k"
  cfg="$ROOT/examples/$kind.yaml"
  [ "$kind" = cache ] && cfg="$TMP/cache.yaml"   # without its compress filter (see above)
  [ "$kind" = hello-h2c ] && cfg="$TMP/hello-h2c.yaml"
  [ "$kind" = cache-tls ] && cfg="$TMP/cache-tls.yaml"
  [ "$kind" = cache-h3 ] && cfg="$TMP/cache-h3.yaml"
  [ "$kind" = grpc-h2 ] && cfg="$TMP/grpc-h2.yaml"
  case $kind in proxy-trace*) cfg="$TMP/$kind.yaml" ;; esac
  origin=$ORIGIN_PORT; [ "$kind" = grpc-h2 ] && origin=$GRPC_ORIGIN_PORT
  for which in old new; do
    if [ "$which" = old ]; then bin=$OLD_WEIR; else bin=$NEW_WEIR; fi
    # shellcheck disable=SC2086
    ORIGIN_PORT=$origin instructions "$bin" "$cfg" "$path" $args
    IU[$name,$which]=$INS
    log "callgrind $name $which: $INS instructions/request"
  done
done

# System calls per request of the HTTP/2-over-TLS row (strace -c): what 78d18ae added there was
# one write per answer, a cost in the kernel that instruction counts barely see (0.95x).
declare -A SYS
syscalls() { # which binary
  local which=$1 bin=$2 port=18398 pid sp
  WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$port WEIR_ORIGIN=127.0.0.1:$ORIGIN_PORT WEIR_ADMIN=127.0.0.1:0 \
    taskset -c "$SUT_CORE" "$bin" run -c "$TMP/cache-tls.yaml" 2>"$TMP/sys-$which.log" &
  pid=$!; track $pid
  wait_port $port "$TMP/sys-$which.log"
  taskset -c "$LOAD_CORE" h2load -t 1 -n 1000 -c 100 -m 10 "https://127.0.0.1:$port/s1024" >/dev/null 2>&1 || true
  strace -c -f -p "$pid" -o "$TMP/strace-$which.out" 2>/dev/null & sp=$!
  sleep 0.5
  taskset -c "$LOAD_CORE" h2load -t 1 -n 20000 -c 100 -m 10 "https://127.0.0.1:$port/s1024" >/dev/null 2>&1 || true
  kill -INT "$sp"; wait "$sp" 2>/dev/null || true
  SYS[$which]=$(awk '$NF == "total" { printf "%.2f", $4 / 20000 }' "$TMP/strace-$which.out")
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  log "system calls per h2 request, $which: ${SYS[$which]}"
}
syscalls old "$OLD_WEIR"
syscalls new "$NEW_WEIR"

OUT="$ROOT/bench/results/ab-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# weir A/B: $("$OLD_WEIR" version 2>/dev/null | head -1) (old) vs $(git -C "$ROOT" rev-parse --short HEAD) (new)"
  echo
  machine_info
  echo "- old: ${OLD_REV:-$OLD_WEIR}; each cell: wrk -t1 -d$DUR, median of $ROUNDS rounds, order alternated"
  echo
  if [ "$ROUNDS" -gt 0 ]; then
  echo "| cell | old CPU µs/req | new CPU µs/req | new/old | old req/s | new req/s | old p99 µs | new p99 µs |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for cell in "${CELLS[@]}"; do
    name=${cell%%|*}
    oc=$(median ${CPU[$name,old]}); nc=$(median ${CPU[$name,new]})
    echo "| $name | $oc | $nc | $(ratio "$nc" "$oc") | $(median ${RPSV[$name,old]}) | $(median ${RPSV[$name,new]}) | $(median ${P99[$name,old]}) | $(median ${P99[$name,new]}) |"
  done
  echo
  fi
  echo "User-space instructions per request (callgrind, $CG_N requests after a 500-request warm-up, weir bench -c 10; h2-tls-hit-1KiB: h2load -c 100 -m 10 over TLS; h1-tls-hit-1KiB: h2load --h1 -c 100 over TLS; h3-hit-1KiB: weir bench --h3 -c 10 --streams 10, its 10 handshakes included; grpc-h2-1KiB: weir bench --h2 -c 10 --streams 10, a POST of a 1 KiB gRPC frame proxied to an h2c origin over the HTTP/2 upstream path):"
  echo
  echo "| request | old | new | new/old |"
  echo "|---|---:|---:|---:|"
  for name in hello-ka hello-close hit-1KiB proxy-1KiB hello-h2c h2-tls-hit-1KiB h1-tls-hit-1KiB h3-hit-1KiB grpc-h2-1KiB proxy-1KiB-trace100 proxy-1KiB-trace1; do
    echo "| $name | ${IU[$name,old]} | ${IU[$name,new]} | $(ratio "${IU[$name,new]}" "${IU[$name,old]}") |"
  done
  echo
  echo "Tracing's cost in the new build (issue 55 §4): with every request's spans exported, a proxied request at $(ratio "${IU[proxy-1KiB-trace100,new]}" "${IU[proxy-1KiB,new]}") its instructions without tracing (target 1.15); with 1% sampled, $(ratio "${IU[proxy-1KiB-trace1,new]}" "${IU[proxy-1KiB,new]}") (target 1.03)."
  echo
  echo "System calls per request, h2-tls-hit-1KiB (strace -c, 20,000 requests): old ${SYS[old]}, new ${SYS[new]} ($(ratio "${SYS[new]}" "${SYS[old]}"))"
  echo
  if [ "$ROUNDS" -gt 0 ]; then
  echo "Every round, old then new or new then old:"
  echo
  for cell in "${CELLS[@]}"; do
    name=${cell%%|*}
    echo "- $name: old CPU ${CPU[$name,old]}/ new CPU ${CPU[$name,new]}"
  done
  fi
} > "$OUT"
cat "$OUT"
log "results in $OUT"
