# Shared helpers for the bench scripts: sourced, not run.
# Conventions: the system under test runs on core 0, the load generator on core 1; every server
# started is registered with `track` and stopped on exit or interrupt.

set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
# examples/hello.yaml serves /static/ from WEIR_ROOT: absolute, so that builds from before
# relative roots resolved against the config file (A/B runs) find it too.
export WEIR_ROOT="$ROOT/examples/www"
cd "$ROOT"
SUT_CORE="${SUT_CORE:-0}"
LOAD_CORE="${LOAD_CORE:-1}"
CLK_TCK="$(getconf CLK_TCK)"
TMP="$(mktemp -d /tmp/weir-bench.XXXXXX)"
PIDS=()

track() { PIDS+=("$1"); }
cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "bench: $*" >&2; }

# Installs Debian packages that are missing (needs root; runs apt-get update once).
ensure_pkgs() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Writes DIR/nginx.conf: one worker, foreground, pid and error log in DIR, then the `http` block
# whose inside is read from stdin. Usage: nginx_conf DIR <<EOF ... EOF
nginx_conf() {
  local dir=$1
  mkdir -p "$dir"
  {
    echo "worker_processes 1;"
    echo "daemon off;"
    echo "pid $dir/nginx.pid;"
    echo "error_log $dir/error.log warn;"
    echo "worker_rlimit_nofile 20000;"
    echo "events { worker_connections ${NGINX_WORKER_CONNECTIONS:-19000}; }"
    echo "http {"
    cat
    echo "}"
  } > "$dir/nginx.conf"
}

# Starts nginx from DIR/nginx.conf pinned to CORE; sets NGINX_STARTED (the master's pid).
start_nginx() {
  taskset -c "$2" nginx -c "$1/nginx.conf" -e "$1/error.log" &
  NGINX_STARTED=$!
  track $NGINX_STARTED
}

# Writes FILE: a one-thread HAProxy with keep-alive upstream reuse, then the sections read from
# stdin. Usage: haproxy_conf FILE <<EOF ... EOF
haproxy_conf() {
  {
    printf 'global\n  nbthread 1\n  maxconn 8000\n'
    printf 'defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  http-reuse always\n'
    cat
  } > "$1"
}

# Starts an nginx origin on the load core, on 127.0.0.1:PORT, serving files /sN of N bytes for
# each size given, without an access log. Usage: file_origin PORT SIZE...
file_origin() {
  local port=$1 n; shift
  chmod 755 "$TMP"; mkdir -p "$TMP/www"
  for n in "$@"; do head -c "$n" /dev/zero | tr '\0' 'x' > "$TMP/www/s$n"; done
  chmod -R a+rX "$TMP/www"
  nginx_conf "$TMP/origin" <<NGX
  access_log off;
  default_type text/plain;
  server { listen 127.0.0.1:$port; root $TMP/www; }
NGX
  start_nginx "$TMP/origin" "$LOAD_CORE"
  wait_port "$port" "$TMP/origin/error.log"
}

build_weir() {
  # WEIR_BIN=/path/to/weir measures that binary instead (a before/after figure).
  if [ -n "${WEIR_BIN:-}" ]; then WEIR=$WEIR_BIN; log "using $WEIR"; return; fi
  log "building weir (release)"
  (cd "$ROOT" && cargo build --release -q)
  WEIR="$ROOT/target/release/weir"
}

raise_nofile() { ulimit -n "$(ulimit -Hn)" 2>/dev/null || true; }

# Waits until something accepts on 127.0.0.1:$1; $2 names a log to show if nothing does.
wait_port() {
  local i
  for i in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  log "nothing listens on port $1"
  [ -n "${2:-}" ] && cat "$2" >&2
  return 1
}

# user+sys CPU ticks of a process (all its threads).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
user_ticks() { awk '{print $14}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

# "busy idle" ticks of core $1 from /proc/stat (idle includes iowait).
core_ticks() { awk -v c="cpu$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
# Busy % of a core between two core_ticks samples.
busy_pct() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); t = (y[1] - x[1]) + (y[2] - x[2]);
                                             if (t > 0) printf "%.0f", 100 * (y[1] - x[1]) / t; else print "n/a" }'; }

# Runs wrk on the load core against URL with extra args; prints the raw output to $TMP/wrk.out.
# Sets REQS, RPS, P50_US, P99_US, ERRORS, CPU_US_PER_REQ and USER_US_PER_REQ (user time only)
# (for server pid $1), and SUT_BUSY and
# LOAD_BUSY: how busy (%) the server's and the load generator's cores were, which tells which
# side limited requests/s.
run_wrk() {
  local pid="$1" url="$2"; shift 2
  local t0 t1 s0 s1 l0 l1
  t0=$(cpu_ticks "$pid"); u0=$(user_ticks "$pid"); s0=$(core_ticks "$SUT_CORE"); l0=$(core_ticks "$LOAD_CORE")
  taskset -c "$LOAD_CORE" wrk --latency "$@" "$url" > "$TMP/wrk.out" 2>&1 || true
  t1=$(cpu_ticks "$pid"); u1=$(user_ticks "$pid"); s1=$(core_ticks "$SUT_CORE"); l1=$(core_ticks "$LOAD_CORE")
  SUT_BUSY=$(busy_pct "$s0" "$s1"); LOAD_BUSY=$(busy_pct "$l0" "$l1")
  REQS=$(awk '/requests in/ {print $1}' "$TMP/wrk.out")
  RPS=$(awk '/Requests\/sec/ {printf "%.0f", $2}' "$TMP/wrk.out")
  P50_US=$(awk '$1=="50%" {print $2}' "$TMP/wrk.out" | to_us)
  P99_US=$(awk '$1=="99%" {print $2}' "$TMP/wrk.out" | to_us)
  ERRORS=$(awk '/Socket errors/ {gsub(",",""); print $4+$6+$8+$10} /Non-2xx/ {print "non2xx:"$4}' "$TMP/wrk.out" | paste -sd' ')
  ERRORS=${ERRORS:-0}
  CPU_US_PER_REQ=$(awk -v d=$((t1 - t0)) -v r="${REQS:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", d * 1e6 / hz / r; else print "n/a" }')
  USER_US_PER_REQ=$(awk -v d=$((u1 - u0)) -v r="${REQS:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.3f", d * 1e6 / hz / r; else print "n/a" }')
}

# wrk prints 1.23ms / 456.00us / 1.2s; convert to microseconds.
to_us() {
  awk '{ v=$1; if (v ~ /us$/) { sub(/us$/,"",v); printf "%.0f\n", v }
         else if (v ~ /ms$/) { sub(/ms$/,"",v); printf "%.0f\n", v*1000 }
         else if (v ~ /s$/) { sub(/s$/,"",v); printf "%.0f\n", v*1000000 } }'
}

# Median of the numbers given ("n/a" and empty ignored).
median() {
  printf '%s\n' "$@" | awk '$1 != "n/a" && $1 != ""' | sort -g |
    awk '{ a[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2];
                               else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# The remaining arguments, one per line, rotated left by $1: each round of a benchmark starts
# with a different system, so a slow spell of the shared machine (or kernel state such as the
# TIME_WAIT table) does not always land on the same one.
rotated() {
  local k=$1; shift
  local items=("$@") n=$# i
  for ((i = 0; i < n; i++)); do echo "${items[$(((i + k) % n))]}"; done
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b ~ /^[0-9.]+$/ && a ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }

machine_info() {
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), kernel $(uname -r)"
  echo "- weir: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), $("$WEIR" version)"
  command -v nginx >/dev/null && echo "- nginx: $(nginx -v 2>&1 | sed 's/.*: //')"
  command -v wrk >/dev/null && echo "- wrk: $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}')"
  echo "- pinning: servers on core $SUT_CORE, load generator on core $LOAD_CORE (taskset)"
}

# RSS of PID before and after IDLE keep-alive connections to PORT (each after one request to
# PATH) are opened and held: prints "before after" in KiB. `tls` as the fourth argument makes
# them TLS connections (`h2`: HTTP/2 over TLS); a fifth sets their number instead of $IDLE.
# RSS is read IDLE_SETTLE seconds (default 3) after the last connection got its answer: an idle
# connection is one that has been idle a while (weir parks plain ones after one to two sweeps,
# at most 2 s; server/park.rs).
# Usage: idle_rss PID PORT [PATH] [tls|h2|plain] [COUNT]
idle_rss() {
  local pid=$1 port=$2 path=${3:-/hello} mode=${4:-plain} n=${5:-$IDLE} before after line
  before=$(rss_kib "$pid")
  coproc HOLD { taskset -c "$LOAD_CORE" python3 "$BENCH_DIR/tools/idle_conns.py" "$port" "$n" "$path" "$mode"; }
  read -r line <&"${HOLD[0]}"
  sleep "${IDLE_SETTLE:-3}"
  after=$(rss_kib "$pid")
  exec {HOLD[1]}>&-
  wait "$HOLD_PID" 2>/dev/null || true
  echo "$before $after"
}

# h2load -t 1 for $SECS seconds on the load core, run in the current directory (bench/tls.sh,
# bench/h3.sh); sets RPS, DONE, FAILED, CPU_US (server CPU µs per request).
run_h2load() { # pid url args...
  local pid=$1 url=$2; shift 2
  local t0 t1
  t0=$(cpu_ticks "$pid")
  taskset -c "$LOAD_CORE" h2load -t 1 -D "$SECS" "$@" "$url" > h2load.out 2>&1 || true
  t1=$(cpu_ticks "$pid")
  RPS=$(awk '/^finished in/ {gsub(",",""); printf "%.0f", $4}' h2load.out)
  DONE=$(awk '/^requests:/ {print $8}' h2load.out)
  FAILED=$(awk '/^requests:/ {print $10 + $12 + $14}' h2load.out)
  CPU_US=$(awk -v d=$((t1 - t0)) -v r="${DONE:-0}" -v hz="$CLK_TCK" 'BEGIN { if (r > 0) printf "%.2f", d * 1e6 / hz / r; else print "n/a" }')
}

# User-space instructions per request of weir binary BIN serving CONFIG, counted by callgrind over
# CG_N requests (`weir bench -n`, load generator $WEIR) after a 500-request warm-up: sets INS.
# Args: BIN CONFIG PATH bench-args... ($ORIGIN_PORT is passed as WEIR_ORIGIN when set.)
CG_N=${CG_N:-5000}
cg_instructions() {
  local bin=$1 cfg=$2 path=$3; shift 3
  local port=18399 pid out
  WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$port WEIR_ORIGIN=127.0.0.1:${ORIGIN_PORT:-19301} WEIR_ADMIN=127.0.0.1:0 \
    taskset -c "$SUT_CORE" valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out.%p" \
    "$bin" run -c "$cfg" 2>"$TMP/cg.log" &
  pid=$!; track $pid
  # (A build that refuses the config, one from before a feature, exits: its row is n/a.)
  for _ in $(seq 1 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if ! kill -0 "$pid" 2>/dev/null; then
    INS=n/a
    return 0
  fi
  if [ "${1:-}" = H3 ]; then
    # HTTP/3 (weir bench --h3) to the listener's UDP side.
    shift
    taskset -c "$LOAD_CORE" "$WEIR" bench --h3 -n 500 "$@" "https://127.0.0.1:$port$path" >/dev/null 2>&1 || true
    callgrind_control -z "$pid" >/dev/null 2>&1
    taskset -c "$LOAD_CORE" "$WEIR" bench --h3 -n "$CG_N" "$@" "https://127.0.0.1:$port$path" >/dev/null 2>&1 || true
  elif [ "${1:-}" = H2LOAD ]; then
    # HTTP/2 over TLS with h2load's pattern (many connections, each with streams in flight
    # and new requests as answers arrive), the rest of the arguments its own.
    shift
    taskset -c "$LOAD_CORE" h2load -t 1 -n 500 "$@" "https://127.0.0.1:$port$path" >/dev/null 2>&1 || true
    callgrind_control -z "$pid" >/dev/null 2>&1
    taskset -c "$LOAD_CORE" h2load -t 1 -n "$CG_N" "$@" "https://127.0.0.1:$port$path" >/dev/null 2>&1 || true
  else
  taskset -c "$LOAD_CORE" "$WEIR" bench -n 500 "$@" "http://127.0.0.1:$port$path" >/dev/null 2>&1 || true
  callgrind_control -z "$pid" >/dev/null 2>&1
  taskset -c "$LOAD_CORE" "$WEIR" bench -n "$CG_N" "$@" "http://127.0.0.1:$port$path" >/dev/null 2>&1 || true
  fi
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 0.5
  out=$(ls -t "$TMP"/cg.out."$pid"* 2>/dev/null | head -1 || true)
  INS=$(awk -v n="$CG_N" '/^(summary|totals):/ {t=$2} END { if (t > 0) printf "%.0f", t / n; else print "n/a" }' "$out")
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  rm -f "$TMP"/cg.out.*
}

# Writes FILE: one worker with a TLS 1.3 listener at $WEIR_LISTEN caching what the origin at
# $WEIR_ORIGIN serves, certificate and key in $TMP (made here). bench/ab_weir.sh and
# bench/h2_ab.sh load it with h2load. The objects are fresh for a day (`ttl`, as
# examples/cache.yaml gives the HTTP/1.1 hit rows): `file_origin` sends no Cache-Control, and
# heuristic freshness (a tenth of the few seconds since the files were made) had these rows
# revalidate now and then, as the run's timing fell, ±3,000 instructions a request between
# runs of one binary (2026-11-29). Usage: cache_tls_yaml FILE
cache_tls_yaml() {
  [ -f "$TMP/cert.pem" ] || openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -days 30 -keyout "$TMP/key.pem" -out "$TMP/cert.pem" -subj /CN=localhost 2>/dev/null
  cat > "$1" <<YAML
workers: 1
limits: { max_requests_per_connection: 0 }
cache_zones: { z: { max_size: 64m } }
upstreams: { o: { servers: ["\${WEIR_ORIGIN}"] } }
listeners:
  - address: \${WEIR_LISTEN}
    tls:
      certificates: [{ cert: $TMP/cert.pem, key: $TMP/key.pem }]
      protocols: [tls1.3]
    routes:
      - proxy: { upstream: o }
        cache: { zone: z, ttl: { "200": 1d } }
YAML
}
