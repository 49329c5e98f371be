#!/usr/bin/env bash
# Real nginx configurations (bench/nginx_corpus/configs, sources in SOURCES.md) served by nginx and,
# after `weir import`, by weir, side by side against the same local origins; the answers compared.
#
#   bench/nginx_corpus.sh                  # every config
#   CONFIGS="drupal mastodon" bench/nginx_corpus.sh
#   KEEP=1 bench/nginx_corpus.sh           # keep the run directory (logs, weir.yaml per config)
#
# Environment (defaults): WEIR (target/debug/weir), NGINX (nginx), PHP_FPM (php-fpm8.2),
# NGINX_HTTP_PORT 18800, NGINX_TLS_PORT 18801, WEIR_HTTP_PORT 18810, WEIR_TLS_PORT 18811,
# ORIGIN_A_PORT 18820, ORIGIN_B_PORT 18821, ORIGIN_C_PORT 18822, PHP_PORT 18830. 127.0.0.1 only.
# Placeholders in the configs: @HTTP@ @TLS@ (listen ports), @ROOT@ (document root), @ORIGIN_A@
# @ORIGIN_B@ @ORIGIN_C@ (origin host:port), @PHP@ (php-fpm host:port), @PHP_SOCK@ (php-fpm socket),
# @CERT@ @KEY@ (self-signed), @DIR@ (this config's run directory: logs, cache, letsencrypt files).
# Prints the table (config, requests, same, different), the never-served-from-disk check, every
# difference with both answers, then what `weir import` said for each config.
# Exit status: 0, or 1 when weir served a file from disk that nginx refused, ran or kept internal.
set -u
ROOTDIR=$(cd "$(dirname "$0")/.." && pwd)
HERE=$ROOTDIR/bench/nginx_corpus
WEIR=${WEIR:-$ROOTDIR/target/debug/weir}
NGINX=${NGINX:-nginx}
PHP_FPM=${PHP_FPM:-php-fpm8.2}
NGINX_HTTP_PORT=${NGINX_HTTP_PORT:-18800}
NGINX_TLS_PORT=${NGINX_TLS_PORT:-18801}
WEIR_HTTP_PORT=${WEIR_HTTP_PORT:-18810}
WEIR_TLS_PORT=${WEIR_TLS_PORT:-18811}
ORIGIN_A_PORT=${ORIGIN_A_PORT:-18820}
ORIGIN_B_PORT=${ORIGIN_B_PORT:-18821}
ORIGIN_C_PORT=${ORIGIN_C_PORT:-18822}
PHP_PORT=${PHP_PORT:-18830}
CONFIGS=${CONFIGS:-"wordpress drupal nextcloud laravel symfony spa-api spa-rewrites rails-unicorn rails-cable django-gunicorn node-websocket mastodon tls-lb certbot-static certbot-proxy"}

[ -x "$WEIR" ] || { echo "no weir binary at $WEIR (cargo build -p weir)" >&2; exit 2; }
command -v "$NGINX" >/dev/null || { echo "nginx not found" >&2; exit 2; }

RUN=$(mktemp -d /tmp/nginx_corpus.XXXXXX)
chmod 755 "$RUN"
OUT=$RUN/out
mkdir -p "$OUT"
PIDS=()

stop_pid() { # stop one process we started, by its pid
    local p=$1
    kill "$p" 2>/dev/null || return 0
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
}
cleanup() {
    for p in "${PIDS[@]}"; do stop_pid "$p"; done
    if [ "${KEEP:-0}" = 1 ]; then echo "run directory kept: $RUN" >&2; else rm -rf "$RUN"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() { # wait_port PORT [tls]: until something accepts on 127.0.0.1:PORT (10 s)
    python3 - "$1" <<'EOF'
import socket, sys, time
end = time.time() + 10
while time.time() < end:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
EOF
}

# document root: the fixtures, plus a .git/config (git cannot hold a .git directory)
cp -a "$HERE/fixtures/www" "$RUN/www"
mkdir -p "$RUN/www/.git"
printf '[core]\n\trepositoryformatversion = 0\n[remote "origin"]\n\turl = https://SECRET@example.invalid/x.git\n' > "$RUN/www/.git/config"
chmod -R a+rX "$RUN/www"

# a self-signed certificate, certbot's options file and its ffdhe2048 dhparam
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=corpus.test \
    -keyout "$RUN/key.pem" -out "$RUN/cert.pem" 2>/dev/null
openssl genpkey -genparam -algorithm DH -pkeyopt group:ffdhe2048 -out "$RUN/ssl-dhparams.pem" 2>/dev/null

# origins
for o in "A $ORIGIN_A_PORT" "B $ORIGIN_B_PORT" "C $ORIGIN_C_PORT"; do
    set -- $o
    python3 "$HERE/origin.py" "origin-$1" "$2" > "$RUN/origin-$1.log" 2>&1 &
    PIDS+=($!)
done

# php-fpm: a TCP pool and a unix-socket pool
HAVE_PHP=0
if command -v "$PHP_FPM" >/dev/null; then
    cat > "$RUN/php-fpm.conf" <<EOF
[global]
pid = $RUN/php-fpm.pid
error_log = $RUN/php-fpm.log
daemonize = no
[tcp]
user = nobody
group = nogroup
listen = 127.0.0.1:$PHP_PORT
pm = static
pm.max_children = 2
clear_env = yes
[sock]
user = nobody
group = nogroup
listen = $RUN/php.sock
listen.mode = 0666
pm = static
pm.max_children = 2
EOF
    "$PHP_FPM" -R -F -y "$RUN/php-fpm.conf" > "$RUN/php-fpm.out" 2>&1 &
    PIDS+=($!)
    HAVE_PHP=1
fi
for p in $ORIGIN_A_PORT $ORIGIN_B_PORT $ORIGIN_C_PORT; do wait_port "$p" || echo "origin on $p did not start" >&2; done
[ $HAVE_PHP = 1 ] && { wait_port "$PHP_PORT" || echo "php-fpm did not start (see $RUN/php-fpm.log)" >&2; }

subst() { # subst SRC DEST HTTP_PORT TLS_PORT DIR
    sed -e "s#@HTTP@#$3#g; s#@TLS@#$4#g; s#@ROOT@#$RUN/www#g; s#@PHP@#127.0.0.1:$PHP_PORT#g" \
        -e "s#@PHP_SOCK@#$RUN/php.sock#g; s#@CERT@#$RUN/cert.pem#g; s#@KEY@#$RUN/key.pem#g; s#@DIR@#$5#g" \
        -e "s#@ORIGIN_A@#127.0.0.1:$ORIGIN_A_PORT#g; s#@ORIGIN_B@#127.0.0.1:$ORIGIN_B_PORT#g" \
        -e "s#@ORIGIN_C@#127.0.0.1:$ORIGIN_C_PORT#g" "$1" > "$2"
}

prepare() { # prepare SIDE_DIR HTTP_PORT TLS_PORT: conf/nginx.conf including conf/site.conf
    local d=$1
    # html: the prefix's own directory, as an nginx install has it (/usr/share/nginx/html)
    mkdir -p "$d/conf/snippets" "$d/logs" "$d/cache" "$d/letsencrypt" "$d/html"
    chmod 777 "$d/cache"
    cp /etc/nginx/mime.types /etc/nginx/fastcgi.conf /etc/nginx/fastcgi_params "$d/conf/"
    cp /etc/nginx/snippets/fastcgi-php.conf "$d/conf/snippets/"
    cp "$RUN/ssl-dhparams.pem" "$d/letsencrypt/"
    cat > "$d/letsencrypt/options-ssl-nginx.conf" <<'EOF'
# certbot's options-ssl-nginx.conf
ssl_session_cache shared:le_nginx_SSL:10m;
ssl_session_timeout 1440m;
ssl_session_tickets off;

ssl_protocols TLSv1.2 TLSv1.3;
ssl_prefer_server_ciphers off;

ssl_ciphers "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384";
EOF
    subst "$HERE/configs/$name.conf" "$d/conf/site.conf" "$2" "$3" "$d"
    cat > "$d/conf/nginx.conf" <<'EOF'
worker_processes 1;
events { worker_connections 256; }
http {
    include mime.types;
    default_type application/octet-stream;
    include site.conf;
}
EOF
}

for name in $CONFIGS; do
    [ -f "$HERE/configs/$name.conf" ] || { echo "no config $name" >&2; continue; }
    D=$RUN/$name
    prepare "$D/nginx" "$NGINX_HTTP_PORT" "$NGINX_TLS_PORT"
    prepare "$D/weir" "$WEIR_HTTP_PORT" "$WEIR_TLS_PORT"
    chmod -R a+rX "$D"

    # weir import: the same file nginx runs, with weir's ports
    (cd "$D/weir/conf" && "$WEIR" import --prefix "$D/weir" nginx.conf > ../weir.yaml 2> ../import.stderr)
    {
        echo "exit status $?"
        cat "$D/weir/import.stderr"
        grep -h '# weir import' "$D/weir/weir.yaml" | sed 's/^ *//' | sort | uniq -c | sed 's/^ */comment x/'
        echo "weir check --no-bind:"
        (cd "$D/weir" && "$WEIR" check --no-bind -c weir.yaml 2>&1 | tail -n 5)
    } > "$OUT/$name.import.txt"

    "$NGINX" -p "$D/nginx" -c "$D/nginx/conf/nginx.conf" -e "$D/nginx/logs/error.log" \
        -g "daemon off; pid $D/nginx/nginx.pid; error_log $D/nginx/logs/error.log;" \
        > "$D/nginx/stdout.log" 2>&1 &
    NPID=$!
    PIDS+=($NPID)
    (cd "$D/weir" && exec "$WEIR" run -c weir.yaml --pid-file "$D/weir/weir.pid") > "$D/weir/run.log" 2>&1 &
    WPID=$!
    PIDS+=($WPID)

    ok=1
    grep -q '@TLS@' "$HERE/configs/$name.conf" && ports="$NGINX_TLS_PORT $WEIR_TLS_PORT" || ports=""
    grep -q '@HTTP@' "$HERE/configs/$name.conf" && ports="$ports $NGINX_HTTP_PORT $WEIR_HTTP_PORT"
    for p in $ports; do
        wait_port "$p" || { echo "$name: nothing listening on $p" >&2; ok=0; }
    done
    if [ $ok = 0 ]; then
        echo "$name: nginx log:" >&2; tail -n 5 "$D/nginx/logs/error.log" "$D/nginx/stdout.log" >&2
        echo "$name: weir log:" >&2; tail -n 5 "$D/weir/run.log" >&2
    fi
    python3 "$HERE/compare.py" run "$name" --nginx "$NGINX_HTTP_PORT" "$NGINX_TLS_PORT" \
        --weir "$WEIR_HTTP_PORT" "$WEIR_TLS_PORT" --docroot "$RUN/www" --out "$OUT/$name.json" >&2
    stop_pid "$NPID"
    stop_pid "$WPID"
    wait "$NPID" "$WPID" 2>/dev/null
done

echo "# nginx corpus: nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') vs $("$WEIR" version 2>/dev/null | head -1)"
echo
python3 "$HERE/compare.py" report "$OUT"
status=$?
echo
echo "## What weir import said, per config"
echo
for name in $CONFIGS; do
    [ -f "$OUT/$name.import.txt" ] || continue
    echo "### $name"
    echo
    echo '```'
    sed "s#$RUN#RUN#g" "$OUT/$name.import.txt"
    echo '```'
    echo
done
exit $status
