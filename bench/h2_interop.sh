#!/usr/bin/env bash
# HTTP/2 interop (issue 54): weir's own HTTP/2 server against the clients people use, each
# checked for what it got, not only that it ran:
#   curl (TLS ALPN h2, and h2c with prior knowledge), nghttp (every asset of a page),
#   h2load (streams in flight on many connections), Go's net/http client (TLS, h2 forced),
#   Python's httpx with h2, and headless Chromium loading a page with 50 assets over TLS
#   (its network log must show 51 responses over h2).
# Usage: bench/h2_interop.sh   (results in bench/results/h2-interop-<date>.md)
source "$(dirname "$0")/lib.sh"
ensure_pkgs curl nghttp2-client chromium python3-pip
python3 -c 'import httpx, h2' 2>/dev/null || pip install --break-system-packages -q 'httpx[http2]'
GO=$(command -v go || echo /usr/local/go/bin/go)
build_weir
cd "$TMP"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -keyout key.pem -out cert.pem -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
mkdir -p www/assets
{
  echo '<!doctype html><html><head><title>fifty</title></head><body>'
  for i in $(seq 1 50); do
    head -c $((1000 + i * 300)) /dev/urandom | base64 -w0 > "www/assets/a$i.txt"
    echo "<img src=\"/assets/a$i.txt\">"
  done
  echo '</body></html>'
} > www/index.html
cat > weir.yaml <<YAML
workers: 1
listeners:
  - address: 127.0.0.1:18841
    tls:
      certificates: [{ cert: '$TMP/cert.pem', key: '$TMP/key.pem' }]
    routes:
      - static: { root: '$TMP/www' }
  - address: 127.0.0.1:18842
    h2c: true
    routes:
      - static: { root: '$TMP/www' }
YAML
"$WEIR" run -c weir.yaml 2>weir.log &
WPID=$!; track $WPID
wait_port 18841; wait_port 18842
T=https://localhost:18841
declare -A R
result() { R[$1]="$2"; log "$1: $2"; }
want=$(cat www/assets/a7.txt)

# curl, both ways.
got=$(curl -s --cacert cert.pem --http2 -w '%{http_version}' -o body.txt "$T/assets/a7.txt")
[ "$got" = 2 ] && [ "$(cat body.txt)" = "$want" ] && result curl-tls "ok (HTTP/$got, body intact)" || result curl-tls "FAILED ($got)"
got=$(curl -s --http2-prior-knowledge -w '%{http_version}' -o body.txt "http://127.0.0.1:18842/assets/a7.txt")
[ "$got" = 2 ] && [ "$(cat body.txt)" = "$want" ] && result curl-h2c "ok (HTTP/$got, body intact)" || result curl-h2c "FAILED ($got)"

# nghttp: the page and every asset it links (-a), over one connection, each ended.
nghttp -anv "$T/" > nghttp.log 2>&1 || true
n=$(grep -c 'recv DATA frame.*flags=0x01' nghttp.log || true)
resets=$(grep -c 'RST_STREAM\|GOAWAY.*error_code=[^N]' nghttp.log || true)
[ "$n" = 51 ] && [ "$resets" = 0 ] && result nghttp "ok (the page and its 50 assets on one connection)" || result nghttp "FAILED ($n streams ended, $resets resets)"

# h2load: 20 connections x 10 streams.
out=$(h2load -n 20000 -c 20 -m 10 "$T/assets/a1.txt" 2>&1)
succ=$(echo "$out" | awk '/^requests:/ {print $8}')
[ "$succ" = 20000 ] && result h2load "ok (20000 succeeded, $(echo "$out" | awk '/^finished in/ {print $4}') req/s)" || result h2load "FAILED: $(echo "$out" | grep '^requests:')"

# Go's net/http (HTTP/2 forced over TLS), 50 assets concurrently on one client.
mkdir -p goclient && cat > goclient/main.go <<'GO'
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
)

func main() {
	pem, _ := os.ReadFile(os.Args[1])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := 1; i <= 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := c.Get(fmt.Sprintf("%s/assets/a%d.txt", os.Args[2], i))
			if err != nil {
				return
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			want, _ := os.ReadFile(fmt.Sprintf("%s/a%d.txt", os.Args[3], i))
			if r.ProtoMajor == 2 && string(b) == string(want) {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	fmt.Println(ok)
}
GO
(cd goclient && [ -f go.mod ] || "$GO" mod init goclient >/dev/null 2>&1; "$GO" build -o ../goclient-bin . ) 2>/dev/null
n=$(./goclient-bin cert.pem "$T" www/assets 2>/dev/null)
[ "$n" = 50 ] && result go-net-http "ok (50 of 50 over HTTP/2, bodies intact)" || result go-net-http "FAILED ($n)"

# Python httpx with h2.
n=$(python3 - "$T" cert.pem www/assets <<'PY'
import sys, httpx
base, ca, root = sys.argv[1:4]
ok = 0
with httpx.Client(http2=True, verify=ca) as c:
    for i in range(1, 51):
        r = c.get(f"{base}/assets/a{i}.txt")
        if r.http_version == "HTTP/2" and r.content == open(f"{root}/a{i}.txt", "rb").read():
            ok += 1
print(ok)
PY
)
[ "$n" = 50 ] && result python-httpx "ok (50 of 50 over HTTP/2, bodies intact)" || result python-httpx "FAILED ($n)"

# Headless Chromium: the page and its 50 assets, from its network log.
CHROME=$(command -v chromium || command -v chromium-browser)
rm -f netlog.json
timeout 60 "$CHROME" --headless=new --no-sandbox --disable-gpu --ignore-certificate-errors \
  --log-net-log="$TMP/netlog.json" --virtual-time-budget=10000 --dump-dom "$T/" > dom.html 2>chrome.log || true
h2=$(python3 - "$TMP/netlog.json" <<'PY'
import json, sys
try:
    log = json.load(open(sys.argv[1]))
except Exception:
    print(0); sys.exit()
names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
paths = set()
for e in log["events"]:
    if names.get(e["type"]) == "HTTP2_SESSION_SEND_HEADERS":
        for h in e.get("params", {}).get("headers", []):
            if h.startswith(":path: "):
                paths.add(h[7:])
print(len(paths))
PY
)
frames=$(grep -o '<img' dom.html | wc -l)
[ "$h2" -ge 51 ] && [ "$frames" = 50 ] && result chromium "ok ($h2 requests over HTTP/2: the page and its 50 assets)" || result chromium "FAILED ($h2 h2 requests, $frames images in the DOM)"

kill $WPID; wait $WPID 2>/dev/null || true
panics=$(grep -ci panic weir.log || true)
OUT="$ROOT/bench/results/h2-interop-$(date +%Y%m%d-%H%M).md"
{
  echo "# HTTP/2 interop, $(date -u +%Y-%m-%d) ($(git -C "$ROOT" rev-parse --short HEAD))"
  echo
  echo "Command: \`bash bench/h2_interop.sh\`. weir serves a page with 50 assets over TLS (ALPN h2) and h2c."
  echo
  echo "| client | result |"
  echo "|---|---|"
  for k in curl-tls curl-h2c nghttp h2load go-net-http python-httpx chromium; do echo "| $k | ${R[$k]} |"; done
  echo
  echo "Panics in weir's log: $panics"
} > "$OUT"
cat "$OUT"
log "results in $OUT"
