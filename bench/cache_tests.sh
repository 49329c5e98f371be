#!/usr/bin/env bash
# The public HTTP cache test suite (http-tests/cache-tests, vendored in bench/tools/cache-tests:
# see VENDORED.md there) against weir as a reverse proxy cache: its origin server on
# 127.0.0.1:8000, weir (release, one worker, a 64 MiB zone, default settings) in front of it,
# and every test run through weir. Needs Node.js 18 or later and npm (undici, for the 1xx tests).
# Prints the count of each result (pass; fail = a MUST failure; optional_fail = a SHOULD;
# yes/no = behaviour checks) and the ids of MUST failures; writes the raw results and the
# summary to bench/results/cache-tests-<date>.{json,md}.
# Usage: bench/cache_tests.sh   (WEIR_BIN=path to test another build)
source "$(dirname "$0")/lib.sh"
ensure_pkgs curl
command -v node >/dev/null || ensure_pkgs nodejs
build_weir
SUITE="$TMP/suite"
cp -r "$BENCH_DIR/tools/cache-tests" "$SUITE"
# The interim (1xx) tests' client is undici's, from npm (the suite's only dependency it uses).
(cd "$SUITE" && npm install --silent --no-audit --no-fund --ignore-scripts --no-save "undici@7" >/dev/null)
VERSION=$(grep -o '[0-9a-f]\{40\}' "$SUITE/VENDORED.md" | head -1 | cut -c1-12)
PORT=8000; P_WEIR=18500
(cd "$SUITE" && npm_package_config_protocol=http npm_package_config_port=$PORT \
  npm_package_config_pidfile="$TMP/suite.pid" exec node test-engine/server/server.mjs >"$TMP/suite.log" 2>&1) &
track $!
wait_port $PORT "$TMP/suite.log"
cat > "$TMP/weir.yaml" <<YAML
workers: 1
cache_zones: { z: { max_size: 64m } }
upstreams: { o: { servers: ["127.0.0.1:$PORT"] } }
listeners:
  - address: 127.0.0.1:$P_WEIR
    routes:
      - proxy: { upstream: o }
        cache: { zone: z }
YAML
"$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
track $!
wait_port $P_WEIR "$TMP/weir.log"
STAMP=$(date -u +%Y%m%d-%H%M)
RAW="$ROOT/bench/results/cache-tests-$STAMP.json"
(cd "$SUITE" && npm_config_base="http://127.0.0.1:$P_WEIR" npm_config_id="" npm_package_config_id="" \
  node --no-warnings test-engine/cli.mjs) > "$RAW"
cat > "$SUITE/weir-count.mjs" <<'JS'
import fs from 'fs'
import tests from './tests/index.mjs'
import { determineTestResult } from './test-engine/lib/results.mjs'
const results = JSON.parse(fs.readFileSync(process.argv[2]))
const kinds = { '✅': 'pass', '⛔️': 'fail', '⚠️': 'optional_fail', Y: 'yes', N: 'no', '🔹': 'setup_fail', '⁉️': 'harness_fail', '⚪️': 'dependency_fail', '-': 'untested', '↻': 'retry' }
const counts = {}
const fails = []
for (const suite of tests) {
  for (const t of suite.tests) {
    const kind = kinds[determineTestResult(tests, t.id, results)[2]] || 'other'
    counts[kind] = (counts[kind] || 0) + 1
    if (kind === 'fail') fails.push(t.id)
  }
}
console.log(Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', '))
console.log(`MUST failures: ${fails.length}${fails.length ? ' (' + fails.join(', ') + ')' : ''}`)
JS
SUMMARY=$(cd "$SUITE" && node --no-warnings weir-count.mjs "$RAW")
OUT="$ROOT/bench/results/cache-tests-$STAMP.md"
{
  echo "# The public HTTP cache test suite (http-tests/cache-tests $VERSION) through weir"
  echo
  machine_info
  echo "- command: \`bench/cache_tests.sh\`; weir: one worker, \`cache: { zone: z }\` with default settings"
  echo "- raw results: \`$(basename "$RAW")\`"
  echo
  echo "$SUMMARY" | sed 's/^/- /'
} > "$OUT"
echo "$SUMMARY"
log "results: $OUT"
