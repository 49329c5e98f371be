# Sourced by the cache benchmarks (seeds 000 and 002): starts an origin and four caches with the
# same rule — cache every 200 for one day whatever the origin says, add a response header — each
# cache with one worker pinned to core 0, the origin on core 1 with the load generator.
# Sets SYSTEMS=("name pid port" ...) and ORIGIN_PORT.

ensure_pkgs nginx-light haproxy varnish wrk curl
build_weir
raise_nofile

ORIGIN_PORT=19101
P_WEIR=18280; P_NGINX=18281; P_HAPROXY=18282; P_VARNISH=18283; P_ADMIN=19909
# nginx workers run as www-data: the temp tree must be readable, the proxy_cache dir writable.
chmod 755 "$TMP"
mkdir -p "$TMP/www"
for n in 12 64 128 256 512 600 1024; do head -c "$n" /dev/zero | tr '\0' 'x' > "$TMP/www/s$n"; done
chmod -R a+rX "$TMP/www"

# --- origin: nginx serving the files, one worker on the load core
nginx_conf "$TMP/origin" <<NGX
  access_log $TMP/origin/access.log;
  default_type text/plain;
  server { listen 127.0.0.1:$ORIGIN_PORT; root $TMP/www; }
NGX
start_nginx "$TMP/origin" "$LOAD_CORE"

# --- weir: examples/cache.yaml with one worker, without its compress filter (the peers do not
# compress: wrk sends no Accept-Encoding, and the hit path is compared as it is)
# Its disk tier stays (nginx caches on disk too), in this run's own directory.
sed -e '/^        filters:$/d' -e '/- compress:/d' "$ROOT/examples/cache.yaml" > "$TMP/cache.yaml"
export WEIR_CACHE_DIR="$TMP/weir-cache"
WEIR_WORKERS=1 WEIR_LISTEN=127.0.0.1:$P_WEIR WEIR_ORIGIN=127.0.0.1:$ORIGIN_PORT WEIR_ADMIN=127.0.0.1:$P_ADMIN \
  taskset -c "$SUT_CORE" "$WEIR" run -c "$TMP/cache.yaml" 2>"$TMP/weir.log" &
WEIR_PID=$!; track $WEIR_PID

# --- nginx proxy_cache
mkdir -p "$TMP/nginx/cache"
chmod 777 "$TMP/nginx/cache"
nginx_conf "$TMP/nginx" <<NGX
  access_log off;
  keepalive_requests 1000000;
  proxy_cache_path $TMP/nginx/cache levels=1:2 keys_zone=c:16m max_size=256m inactive=1d;
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$P_NGINX reuseport backlog=4096;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache c;
      proxy_cache_valid 200 1d;
      proxy_ignore_headers Cache-Control Expires Set-Cookie;
      add_header X-Cache-By nginx;
    }
  }
NGX
start_nginx "$TMP/nginx" "$SUT_CORE"; NGINX_MASTER=$NGINX_STARTED

# --- HAProxy cache
haproxy_conf "$TMP/haproxy.cfg" <<HAP
cache c
  total-max-size 256
  max-object-size 1048576
  max-age 86400
frontend fe
  bind 127.0.0.1:$P_HAPROXY
  http-request cache-use c
  http-response cache-store c
  http-response add-header X-Cache-By haproxy
  default_backend origin
backend origin
  server o 127.0.0.1:$ORIGIN_PORT
HAP
taskset -c "$SUT_CORE" haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.log" &
HAPROXY_PID=$!; track $HAPROXY_PID

# --- Varnish
cat > "$TMP/default.vcl" <<VCL
vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "$ORIGIN_PORT"; }
sub vcl_backend_response { if (beresp.status == 200) { set beresp.ttl = 1d; set beresp.uncacheable = false; } }
sub vcl_deliver { set resp.http.X-Cache-By = "varnish"; }
VCL
mkdir -p "$TMP/varnish"
taskset -c "$SUT_CORE" varnishd -j none -F -a 127.0.0.1:$P_VARNISH -f "$TMP/default.vcl" -n "$TMP/varnish" -s malloc,256m \
  >"$TMP/varnish.log" 2>&1 &
VARNISH_MGR=$!; track $VARNISH_MGR

wait_port $ORIGIN_PORT "$TMP/origin/error.log"; wait_port $P_WEIR "$TMP/weir.log"
wait_port $P_NGINX "$TMP/nginx/error.log"; wait_port $P_HAPROXY "$TMP/haproxy.log"; wait_port $P_VARNISH "$TMP/varnish.log"
NGINX_PID=$(pgrep -P "$NGINX_MASTER" | head -1)
# Varnish serves from its child process (the cache worker); the manager only supervises.
VARNISH_PID=$(pgrep -P "$VARNISH_MGR" -f varnishd | head -1); VARNISH_PID=${VARNISH_PID:-$VARNISH_MGR}
SYSTEMS=("weir $WEIR_PID $P_WEIR" "haproxy $HAPROXY_PID $P_HAPROXY" "nginx $NGINX_PID $P_NGINX" "varnish $VARNISH_PID $P_VARNISH")

# Fills every cache with every object and checks that the second request is a hit (the origin
# sees nothing more).
warm_caches() {
  local s name pid port n before after code
  for s in "${SYSTEMS[@]}"; do
    read -r name pid port <<<"$s"
    for n in "$@"; do
      code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/s$n")
      [ "$code" = 200 ] || { log "$name answered $code for /s$n: setup is broken, stopping"; exit 1; }
      curl -s -o /dev/null "http://127.0.0.1:$port/s$n"
    done
  done
  before=$(origin_hits)
  for s in "${SYSTEMS[@]}"; do
    read -r name pid port <<<"$s"
    for n in "$@"; do curl -s -o /dev/null "http://127.0.0.1:$port/s$n"; done
  done
  after=$(origin_hits)
  [ "$before" = "$after" ] || { log "$((after - before)) warm requests reached the origin: a cache is not caching, stopping"; exit 1; }
}

# Requests the origin has served (its access log; only misses reach it).
origin_hits() { wc -l < "$TMP/origin/access.log" 2>/dev/null || echo 0; }
