#!/usr/bin/env bash
# Issue 53 §1's FastCGI figure: a small PHP page through weir (`protocol: fastcgi`) and through
# nginx (`fastcgi_pass` with `fastcgi_keep_conn on` and an upstream keepalive pool) to the same
# php-fpm, in the same run. Each proxy: 1 worker on core 0; wrk -t1 -c50 and php-fpm (a static
# pool of 64: with kept connections each php-fpm child serves one proxy connection, so the pool
# must outnumber the connections a proxy opens, or requests wait in its backlog) on core 1. Each cell is measured ROUNDS times in rotated order; medians of the
# proxy's CPU µs/request (user+sys from /proc/PID/stat ÷ requests). php-fpm's own CPU is the same
# work for both and is not counted.
# Usage: bench/fastcgi.sh [--quick]    (results in bench/results/fastcgi-<date>.md)
source "$(dirname "$0")/lib.sh"
DUR=8s; ROUNDS=3
[ "${1:-}" = "--quick" ] && { DUR=4s; ROUNDS=1; }
ensure_pkgs nginx-light php8.2-fpm wrk curl
build_weir
raise_nofile

FPM=19501; P_WEIR=18580; P_NGINX=18581
mkdir -p "$TMP/www" "$TMP/fpm"
echo '<?php echo "Hello, World\n";' > "$TMP/www/hello.php"
chmod -R a+rX "$TMP"
cat > "$TMP/fpm/fpm.conf" <<FPMCONF
[global]
error_log = $TMP/fpm/fpm.log
daemonize = no
pid = $TMP/fpm/fpm.pid
[www]
user = nobody
group = nogroup
listen = 127.0.0.1:$FPM
listen.backlog = 4096
pm = static
pm.max_children = 64
pm.max_requests = 0
FPMCONF
taskset -c "$LOAD_CORE" php-fpm8.2 -R -F -y "$TMP/fpm/fpm.conf" 2>"$TMP/fpm/out.log" &
track $!

cat > "$TMP/weir.yaml" <<YAML
workers: 1
upstreams:
  php:
    servers: ['127.0.0.1:$FPM']
    protocol: fastcgi
    fastcgi: { root: '$TMP/www', keep_conn: true }
    keepalive: { max_idle: 64 }
listeners:
  - address: 127.0.0.1:$P_WEIR
    routes:
      - match: { path_regex: '\.php\$' }
        proxy: { upstream: php }
YAML
taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/weir.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 1000000;
  upstream php { server 127.0.0.1:$FPM; keepalive 64; }
  server {
    listen 127.0.0.1:$P_NGINX reuseport backlog=4096;
    root $TMP/www;
    location ~ \.php\$ {
      try_files \$uri =404;
      include /etc/nginx/fastcgi.conf;
      fastcgi_keep_conn on;
      fastcgi_pass php;
    }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED

wait_port $FPM "$TMP/fpm/out.log"; wait_port $P_WEIR "$TMP/weir.log"
wait_port $P_NGINX "$TMP/nginx/error.log"
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)
for port in $P_WEIR $P_NGINX; do
  body=$(curl -s "http://127.0.0.1:$port/hello.php")
  [ "$body" = "Hello, World" ] || { log "port $port answered: $body"; exit 1; }
done

SYSTEMS=("weir $WEIR_PID $P_WEIR" "nginx $NGINX_PID $P_NGINX")
declare -A CPU RPSV P99
for ((r = 0; r < ROUNDS; r++)); do
  while read -r s; do
    read -r name pid port <<<"$s"
    url="http://127.0.0.1:$port/hello.php"
    taskset -c "$LOAD_CORE" wrk -t1 -c50 -d1s "$url" >/dev/null 2>&1 || true
    run_wrk "$pid" "$url" -t1 -c50 -d"$DUR"
    CPU[$name]+="$CPU_US_PER_REQ "; RPSV[$name]+="$RPS "; P99[$name]+="$P99_US "
    log "round $((r + 1)) $name: $RPS req/s, $CPU_US_PER_REQ CPU us/req, p99 ${P99_US}us, errors $ERRORS"
  done < <(rotated "$r" "${SYSTEMS[@]}")
done

OUT="$ROOT/bench/results/fastcgi-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# FastCGI: a small PHP page through weir and nginx to the same php-fpm"
  echo
  machine_info
  echo "- php-fpm: $(php-fpm8.2 -v 2>/dev/null | head -1 | awk '{print $2}'), static pool of 64, core $LOAD_CORE (with wrk)"
  echo "- command: \`bench/fastcgi.sh ${1:-}\`; wrk -t1 -c50 -d$DUR, median of $ROUNDS rounds (order rotated)"
  echo
  echo "| proxy | requests/s | p99 µs | CPU µs/req | vs nginx |"
  echo "|---|---:|---:|---:|---:|"
  nc=$(median ${CPU[nginx]})
  for name in weir nginx; do
    c=$(median ${CPU[$name]})
    echo "| $name | $(median ${RPSV[$name]}) | $(median ${P99[$name]}) | $c | $(ratio "$c" "$nc") |"
  done
  echo
  echo "Every round: $(for name in weir nginx; do printf '%s CPU %s; ' "$name" "${CPU[$name]}"; done)"
} > "$OUT"
cat "$OUT"
log "results in $OUT"
