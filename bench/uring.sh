#!/usr/bin/env bash
# io_uring as a measured experiment (issue 35 §6): what an io_uring transport could save on
# plain HTTP/1.1 on this kernel, before building one into weir. In the same run, pinned to core
# 0 with wrk on core 1: bench/tools/bare_epoll.c (epoll, one read and one write per request),
# bench/tools/bare_uring.c (multishot accept, multishot receive into a provided buffer ring,
# sends without a completion, SINGLE_ISSUER + DEFER_TASKRUN) and weir (examples/hello.yaml,
# 1 worker), hello keep-alive at -c100 and -c1000, ROUNDS rounds in rotated order; medians of
# CPU µs per request. An io_uring transport in weir keeps weir's user-space work per request;
# what it can take away is at most what bare_uring saves over bare_epoll. The issue's bar: weir
# on io_uring ≤ 0.9× weir on epoll.
# Usage: bench/uring.sh [--quick]   (results in bench/results/uring-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=6s; ROUNDS=3
[ "${1:-}" = "--quick" ] && { DUR=3s; ROUNDS=1; }
ensure_pkgs wrk gcc libc6-dev liburing-dev
build_weir
raise_nofile
gcc -O2 -o "$TMP/bare_epoll" "$BENCH_DIR/tools/bare_epoll.c"
gcc -O2 -o "$TMP/bare_uring" "$BENCH_DIR/tools/bare_uring.c" -luring
taskset -c "$SUT_CORE" "$TMP/bare_epoll" 19621 >/dev/null 2>&1 & EPOLL_PID=$!; track $EPOLL_PID
taskset -c "$SUT_CORE" "$TMP/bare_uring" 19622 >"$TMP/uring.log" 2>&1 & URING_PID=$!; track $URING_PID
WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:19623 taskset -c "$SUT_CORE" "$WEIR" run -c "$ROOT/examples/hello.yaml" \
  >/dev/null 2>"$TMP/weir.log" & WEIR_PID=$!; track $WEIR_PID
wait_port 19621; wait_port 19622 "$TMP/uring.log"; wait_port 19623 "$TMP/weir.log"

SYSTEMS=("bare_epoll $EPOLL_PID 19621 /" "bare_uring $URING_PID 19622 /" "weir $WEIR_PID 19623 /hello")
declare -A CPU RPSV
for c in 100 1000; do
  for ((r = 0; r < ROUNDS; r++)); do
    while read -r s; do
      read -r name pid port path <<<"$s"
      url="http://127.0.0.1:$port$path"
      taskset -c "$LOAD_CORE" wrk -t1 -c"$c" -d1s "$url" >/dev/null 2>&1 || true
      run_wrk "$pid" "$url" -t1 -c"$c" -d"$DUR"
      CPU[$name,$c]+="$CPU_US_PER_REQ "; RPSV[$name,$c]+="$RPS "
      log "c$c round $((r + 1)) $name: $RPS req/s, $CPU_US_PER_REQ CPU us/req, errors $ERRORS"
    done < <(rotated "$r" "${SYSTEMS[@]}")
  done
done

OUT="$ROOT/bench/results/uring-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# io_uring vs epoll on plain HTTP/1.1 keep-alive (hello)"
  echo
  machine_info
  echo "- liburing: $(dpkg-query -W -f='${Version}' liburing-dev 2>/dev/null); wrk -t1 -d$DUR, median of $ROUNDS rounds (order rotated)"
  echo
  echo "| connections | server | requests/s | CPU µs/req | vs bare_epoll | vs weir |"
  echo "|---:|---|---:|---:|---:|---:|"
  for c in 100 1000; do
    e=$(median ${CPU[bare_epoll,$c]}); w=$(median ${CPU[weir,$c]})
    for name in bare_epoll bare_uring weir; do
      v=$(median ${CPU[$name,$c]})
      echo "| $c | $name | $(median ${RPSV[$name,$c]}) | $v | $(ratio "$v" "$e") | $(ratio "$v" "$w") |"
    done
    u=$(median ${CPU[bare_uring,$c]})
    echo "| $c | weir on io_uring at best (weir − (bare_epoll − bare_uring)) | | $(awk -v w="$w" -v e="$e" -v u="$u" 'BEGIN { printf "%.2f", w - (e - u) }') | | $(awk -v w="$w" -v e="$e" -v u="$u" 'BEGIN { printf "%.2f", (w - (e - u)) / w }') |"
  done
} > "$OUT"
cat "$OUT"
log "results in $OUT"
