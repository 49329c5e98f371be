#!/usr/bin/env bash
# TLS records after a park: CPU per request on keep-alive TLS 1.3 connections that never parked
# (records by rustls) against the same client on connections that parked first (records by
# weir's own `tls/records.rs`), alternated RUNS times in one weir process; weir (1 worker) on
# core 0, the Python client on core 1. The two phases differ only in who seals and opens.
# Then the same two phases once more with weir under callgrind (CG_ROUNDS requests per
# connection, default 100): user-space instructions per request, which the timing noise of this
# machine (±15%, more for a client this slow) does not blur.
# Usage: bench/tls_woken.sh [RUNS] [CONNS] [ROUNDS]   (results in bench/results/tls-woken-<date>.md)
source "$(dirname "$0")/lib.sh"
RUNS=${1:-3}
CONNS=${2:-50}
ROUNDS=${3:-1000}
ensure_pkgs python3 openssl
build_weir
cd "$TMP"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -keyout key.pem -out cert.pem -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
cat > weir.yaml <<YAML
workers: 1
timeouts: { header: 2s, keepalive: 60s }
admin: { address: 127.0.0.1:18799 }
listeners:
  - address: 127.0.0.1:18798
    tls:
      certificates: [{ cert: $TMP/cert.pem, key: $TMP/key.pem }]
    routes:
      - respond: { body: "Hello, World\n" }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c weir.yaml > weir.log 2>&1 &
PID=$!
track $PID
wait_port 18798 weir.log
OUT="$ROOT/bench/results/tls-woken-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# TLS keep-alive requests: records by rustls (never parked) and by tls/records.rs (woken)"
  echo
  machine_info
  echo "- $CONNS connections × $ROUNDS requests each, one at a time, round-robin; TLS 1.3; \`bash bench/tls_woken.sh $RUNS $CONNS $ROUNDS\`"
  echo
  echo "| run | never parked µs/req | req/s | woken µs/req | req/s | woken / never parked |"
  echo "|---:|---:|---:|---:|---:|---:|"
} > "$OUT"
cg_phase() {
  taskset -c "$SUT_CORE" valgrind --tool=callgrind --callgrind-out-file="$TMP/cgw.%p" \
    "$WEIR" run -c weir.yaml > cg.log 2>&1 &
  local cpid=$!
  track $cpid
  for _ in $(seq 1 600); do (exec 3<>/dev/tcp/127.0.0.1/18798) 2>/dev/null && break; sleep 0.1; done
  CALLGRIND="$TMP/cgw" taskset -c "$LOAD_CORE" python3 "$BENCH_DIR/tools/tls_phases.py" \
    18798 18799 $cpid "$CONNS" "${CG_ROUNDS:-100}" "$1"
  kill $cpid; wait $cpid 2>/dev/null || true
}
for run in $(seq 1 "$RUNS"); do
  read -r fu fr < <(taskset -c "$LOAD_CORE" python3 "$BENCH_DIR/tools/tls_phases.py" 18798 18799 $PID "$CONNS" "$ROUNDS" fresh)
  read -r wu wr < <(taskset -c "$LOAD_CORE" python3 "$BENCH_DIR/tools/tls_phases.py" 18798 18799 $PID "$CONNS" "$ROUNDS" woken)
  log "run $run: never parked $fu µs/req ($fr/s), woken $wu µs/req ($wr/s)"
  echo "| $run | $fu | $fr | $wu | $wr | $(ratio "$wu" "$fu") |" >> "$OUT"
done
kill $PID; wait $PID 2>/dev/null || true
sleep 0.5
fi_=$(cg_phase fresh)
wi_=$(cg_phase woken)
log "instructions: never parked $fi_, woken $wi_"
{
  echo
  echo "User-space instructions per request (callgrind, $CONNS connections × ${CG_ROUNDS:-100} requests, one weir process per phase):"
  echo
  echo "| never parked (rustls) | woken (tls/records.rs) | woken / never parked |"
  echo "|---:|---:|---:|"
  echo "| $fi_ | $wi_ | $(ratio "$wi_" "$fi_") |"
} >> "$OUT"
cat "$OUT"
log "results in $OUT"
