#!/usr/bin/env bash
# io_uring as a measured experiment (issue 35 §6). In the same run, pinned to core 0 with wrk
# (and the origin) on core 1:
# - bench/tools/bare_epoll.c (epoll, one read and one write per request) and
#   bench/tools/bare_uring.c (multishot accept, multishot receive into a provided buffer ring,
#   sends without a completion, SINGLE_ISSUER + DEFER_TASKRUN): the floors;
# - weir built with `--features uring`, one binary, on epoll and with WEIR_URING=1 on its io_uring
#   transport (crates/weir/src/server/uring/): hello (examples/hello.yaml) and a 1 KiB cache hit
#   (examples/cache.yaml without its compress filter and disk tier, nginx as the origin).
# Keep-alive at -c100 and -c1000, ROUNDS rounds in rotated order; medians of CPU µs per request,
# and user-space instructions per request (callgrind, weir bench -c 10) for both transports.
# The issue's bar: weir on io_uring ≤ 0.9× weir on epoll, hello or hit, at -c100 and -c1000.
# Usage: bench/uring.sh [--quick]   (results in bench/results/uring-<date>.md)
#        WEIR_BIN=path measures that binary (it must be built with --features uring).
source "$(dirname "$0")/lib.sh"
DUR=6s; ROUNDS=3
[ "${1:-}" = "--quick" ] && { DUR=3s; ROUNDS=1; }
ensure_pkgs wrk gcc libc6-dev liburing-dev valgrind nginx
if [ -n "${WEIR_BIN:-}" ]; then
  WEIR=$WEIR_BIN
else
  # Its own target directory: the default build (target/release) stays without the feature.
  log "building weir --features uring (release, target/uring)"
  (cd "$ROOT" && CARGO_TARGET_DIR="$ROOT/target/uring" cargo build --release -q --features uring)
  WEIR="$ROOT/target/uring/release/weir"
fi
raise_nofile
gcc -O2 -o "$TMP/bare_epoll" "$BENCH_DIR/tools/bare_epoll.c"
gcc -O2 -o "$TMP/bare_uring" "$BENCH_DIR/tools/bare_uring.c" -luring
ORIGIN_PORT=19301
file_origin "$ORIGIN_PORT" 12 1024
sed -e '/^        filters:$/d' -e '/- compress:/d' -e '/^    disk:/d' "$ROOT/examples/cache.yaml" > "$TMP/cache.yaml"

taskset -c "$SUT_CORE" "$TMP/bare_epoll" 19621 >/dev/null 2>&1 & EPOLL_PID=$!; track $EPOLL_PID
taskset -c "$SUT_CORE" "$TMP/bare_uring" 19622 >"$TMP/uring.log" 2>&1 & URING_PID=$!; track $URING_PID
# start NAME PORT CONFIG URING(0|1): one weir worker on core 0; sets STARTED.
start() {
  WEIR_URING=$4 WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$2 WEIR_ORIGIN=127.0.0.1:$ORIGIN_PORT WEIR_ADMIN=127.0.0.1:0 \
    taskset -c "$SUT_CORE" "$WEIR" run -c "$3" >/dev/null 2>"$TMP/$1.log" &
  STARTED=$!; track $STARTED
}
start weir_epoll 19623 "$ROOT/examples/hello.yaml" 0; WE=$STARTED
start weir_uring 19624 "$ROOT/examples/hello.yaml" 1; WU=$STARTED
start weir_epoll_hit 19625 "$TMP/cache.yaml" 0; WEH=$STARTED
start weir_uring_hit 19626 "$TMP/cache.yaml" 1; WUH=$STARTED
wait_port 19621; wait_port 19622 "$TMP/uring.log"
for p in 19623 19624 19625 19626; do wait_port $p; done
grep -q "on io_uring" "$TMP/weir_uring.log" || { log "weir did not start its io_uring transport:"; cat "$TMP/weir_uring.log" >&2; exit 1; }
curl -s -o /dev/null "http://127.0.0.1:19625/s1024"; curl -s -o /dev/null "http://127.0.0.1:19626/s1024"

SYSTEMS=("bare_epoll $EPOLL_PID 19621 /" "bare_uring $URING_PID 19622 /"
         "weir_epoll $WE 19623 /hello" "weir_uring $WU 19624 /hello"
         "weir_epoll_hit $WEH 19625 /s1024" "weir_uring_hit $WUH 19626 /s1024")
NAMES=(bare_epoll bare_uring weir_epoll weir_uring weir_epoll_hit weir_uring_hit)
declare -A CPU RPSV P99V INSV
for c in 100 1000; do
  for ((r = 0; r < ROUNDS; r++)); do
    while read -r s; do
      read -r name pid port path <<<"$s"
      url="http://127.0.0.1:$port$path"
      taskset -c "$LOAD_CORE" wrk -t1 -c"$c" -d1s "$url" >/dev/null 2>&1 || true
      run_wrk "$pid" "$url" -t1 -c"$c" -d"$DUR"
      CPU[$name,$c]+="$CPU_US_PER_REQ "; RPSV[$name,$c]+="$RPS "; P99V[$name,$c]+="$P99_US "
      log "c$c round $((r + 1)) $name: $RPS req/s, $CPU_US_PER_REQ CPU us/req, p99 $P99_US us, errors $ERRORS"
      [ "$ERRORS" = 0 ] || { log "errors from $name"; exit 1; }
    done < <(rotated "$r" "${SYSTEMS[@]}")
  done
done
for k in "epoll 0 hello $ROOT/examples/hello.yaml /hello" "uring 1 hello $ROOT/examples/hello.yaml /hello" \
         "epoll 0 hit $TMP/cache.yaml /s1024" "uring 1 hit $TMP/cache.yaml /s1024"; do
  read -r io on what cfg path <<<"$k"
  WEIR_URING=$on cg_instructions "$WEIR" "$cfg" "$path" -c 10
  INSV[$io,$what]=$INS
  log "instructions $io $what: $INS"
done

OUT="$ROOT/bench/results/uring-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# io_uring vs epoll on plain HTTP/1.1 keep-alive: the floors and weir's transport"
  echo
  machine_info
  echo "- liburing: $(dpkg-query -W -f='${Version}' liburing-dev 2>/dev/null); wrk -t1 -d$DUR, median of $ROUNDS rounds (order rotated)"
  echo "- weir: $("$WEIR" --version 2>/dev/null | head -1), built with --features uring; weir_uring = the same binary with WEIR_URING=1"
  echo
  echo "| connections | server | requests/s | p99 µs | CPU µs/req | vs bare_epoll | io_uring vs epoll |"
  echo "|---:|---|---:|---:|---:|---:|---:|"
  for c in 100 1000; do
    e=$(median ${CPU[bare_epoll,$c]})
    for name in "${NAMES[@]}"; do
      v=$(median ${CPU[$name,$c]})
      vs=""
      case $name in
        bare_uring) vs=$(ratio "$v" "$e") ;;
        weir_uring) vs=$(ratio "$v" "$(median ${CPU[weir_epoll,$c]})") ;;
        weir_uring_hit) vs=$(ratio "$v" "$(median ${CPU[weir_epoll_hit,$c]})") ;;
      esac
      echo "| $c | $name | $(median ${RPSV[$name,$c]}) | $(median ${P99V[$name,$c]}) | $v | $(ratio "$v" "$e") | $vs |"
    done
  done
  echo
  echo "User-space instructions per request (callgrind, $CG_N requests, weir bench -c 10):"
  echo
  echo "| request | epoll | io_uring | ratio |"
  echo "|---|---:|---:|---:|"
  for what in hello hit; do
    echo "| $what | ${INSV[epoll,$what]} | ${INSV[uring,$what]} | $(ratio "${INSV[uring,$what]}" "${INSV[epoll,$what]}") |"
  done
} > "$OUT"
cat "$OUT"
log "results in $OUT"
